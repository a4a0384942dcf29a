-- A placeholder for the migration of this number on another branch (h-stepcore keeps the
-- numbers contiguous): the integrator replaces it with the real one.
SELECT 1;
