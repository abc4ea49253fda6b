"""Pure, streaming parsers of the raw files of a run (server logs, client output, events).

Every parser reads line by line (or block by block) and never holds a whole file in memory;
every parser tolerates ANSI colour codes, Ray actor prefixes, binary garbage and a truncated
last line, because the files are written by processes that may die at any byte.
"""
