"""`runner tune`: search a recipe's settings for the fastest that keep its accuracy (the `tune:`
block)."""
