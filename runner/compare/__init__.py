"""`runner compare OLD NEW`: did a new engine, driver or prompt make a workload slower or change its
answers (compare.md, compare.json, compare.png)."""
