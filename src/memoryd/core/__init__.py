"""memoryd's pure core: the rules every part shares, with no I/O (no files, processes, SQLite or clock).

`layout` (which files are memory), `text`, `chunking`, `ranking`, `citations`, `results`, `engine`
(the engine contract), `status` (typed engine status), `transcripts`, `redact`, `session_keys`, `replies`.
Nothing is re-exported here, so importing one rule never loads the others.
"""
