"""What every other package stands on: errors and exit codes, paths, the command-line plumbing, JSON
Schemas, vocabularies and the cause-code table. Imports nothing else of the kit."""
