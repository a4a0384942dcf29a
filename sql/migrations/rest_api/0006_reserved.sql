-- Reserved for another branch's migration of this number (placeholder only, so the
-- numbering has no gap on this branch; the merge replaces it with the real one).
SELECT 1;
