__version__ = "0.33.0"
