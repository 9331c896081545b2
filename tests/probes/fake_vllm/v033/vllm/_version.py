__version__ = version = "0.33.0"
