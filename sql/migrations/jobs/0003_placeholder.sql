-- Placeholder for migration 0003, which another branch adds (the jobs module's migrations
-- must be numbered 1..n). It changes nothing; drop this file when merging that branch.
SELECT 1;
