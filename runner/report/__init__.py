"""Reports from results only: report.md, summary.md, the charts (all Markdown is here or in a wing's
report module)."""
