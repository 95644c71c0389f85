"""`python -m c4prep` runs the command line."""
from c4prep.cli import main

main()
