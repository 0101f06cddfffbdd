"""Ray: the way past one machine (`runner go --executor ray`) and report.md's section on where a run
ran."""
