-- jobs 0020: reserved for h-heldkeys (the per-key pick of limited claims); a placeholder
-- so that 0021 installs on this branch. Replaced by that branch's 0020 when merged.
SELECT 1;
