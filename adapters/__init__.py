"""Adapters: implementations of the ports in ``orchestrator._ports``.

Installed as ``orchestrator.adapters``. Each module implements one port and nothing else;
the CLI and the tests choose which to use.
"""
