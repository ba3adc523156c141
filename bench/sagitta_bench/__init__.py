"""sagitta-bench: Sagitta and its peers on the same data, in the same run."""

__version__ = "0.1.0"
