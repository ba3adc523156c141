"""`python -m sagitta_bench ...`."""

from .cli import main

main()
