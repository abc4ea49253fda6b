"""The commands (click): the edge where user input becomes a plan or a collection, and errors
become one line and exit 2. Stage order: cli > report > job > tables > collect > ab_stats > model > parse."""
