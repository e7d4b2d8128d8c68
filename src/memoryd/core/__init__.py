"""memoryd's pure core: the rules every part shares, with no I/O; nothing is re-exported here,
so importing one rule never loads the others."""
