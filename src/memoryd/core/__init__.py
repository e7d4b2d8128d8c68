"""memoryd's pure core: the rules every part shares, with no I/O (no files, processes, SQLite or clock).

Nothing is re-exported here, so importing one rule never loads the others.
"""
