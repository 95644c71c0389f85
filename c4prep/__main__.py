"""`python -m c4prep` runs the command line, as the `c4prep` console script does."""
from c4prep.launch import c4prep

c4prep()
