"""The package version: `graftlib.__version__`, and what every benchmark record names as `graftlib`."""

__version__ = "0.1.0"
