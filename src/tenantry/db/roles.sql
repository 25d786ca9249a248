-- What a process's login may do beyond its pool's role (migration 0015): read by the
-- start-up check. session_user is the login; current_user is the role the pool switched to.

-- name: login_powers
SELECT r.rolname AS login, r.rolsuper AS superuser, r.rolbypassrls AS bypass_rls,
       pg_has_role(session_user, 'tenantry_console', 'MEMBER') AS console
FROM pg_roles r
WHERE r.rolname = session_user
