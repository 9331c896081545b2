"""Static analysis of device code: ELF / fatbin / cubin parsing, scanning, loadability verdicts.

Never starts a process (except ``cuobjdump`` for ``--verify-with-cuobjdump``) and never imports
torch. ``probe.arch.elf`` is the only module that imports pyelftools.
"""
