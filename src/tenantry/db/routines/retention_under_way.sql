-- True only for the length of a call of the retention functions (their SET clause
-- tenantry.retention = 'on'): the immutability triggers let their deletes through. The
-- application role could set it too, but it holds no DELETE privilege for it to matter.

CREATE OR REPLACE FUNCTION tenantry_retention_under_way() RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce(current_setting('tenantry.retention', true), '') = 'on'
$$;
