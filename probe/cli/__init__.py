"""Command-line interface: ``main`` builds the parser; each verb lives in its own module.

A verb module defines ``configure_parser(parser)`` and
``execute(args) -> int``; heavy imports happen inside ``execute`` so ``--help`` stays instant.
"""
