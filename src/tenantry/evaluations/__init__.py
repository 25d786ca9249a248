"""Agent test sets and evaluations (ADR 0034): each agent can have a test set that runs before a
new version or a new model goes live, scored next to the current one. The tenant decides."""
