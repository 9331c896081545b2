__version__ = version = "0.26.0"
