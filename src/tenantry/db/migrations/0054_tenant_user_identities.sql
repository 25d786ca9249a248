-- Sign-in by OpenID Connect (issue 41, ADR 0043 §5): a tenant user is found by their
-- verified address at their first sign-in, which binds them to the provider's subject;
-- later sign-ins must come from that subject, so an address the provider hands to someone
-- else later signs nobody in. Expand only: two nullable columns and an index the previous
-- release never reads.

ALTER TABLE tenant_users
    ADD COLUMN oidc_issuer  text CHECK (length(oidc_issuer) BETWEEN 1 AND 2048),
    ADD COLUMN oidc_subject text CHECK (length(oidc_subject) BETWEEN 1 AND 255),
    ADD CONSTRAINT tenant_users_identity_whole
        CHECK ((oidc_issuer IS NULL) = (oidc_subject IS NULL));

-- An address across tenants (a person may be a user of several).
CREATE INDEX tenant_users_by_email ON tenant_users (lower(email));
