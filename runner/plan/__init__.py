"""Planning before running (`runner plan`): what a recipe will need and can reach on a GPU."""
