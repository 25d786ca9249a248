"""Billing checks that run by themselves: the daily reconciliation of each reporting
operator model account with its provider's report (:mod:`tenantry.billing.schedule`), the
operator's webhook it tells of flagged and late days (:mod:`tenantry.billing.notify`), and
its gauges (:mod:`tenantry.billing.metrics`). The comparison itself is the ledger's
(:mod:`tenantry.ledger.reconcile`)."""
