"""Profiler errors.

The profiler never raises into the application it observes; these are raised only by explicit
setup calls (``Profiler(...)``, ``register``) when they are misused::

    BamlStudioError
    └── ProfilerError
        ├── FunctionRegistrationError   a name registered twice with a different definition
        └── ProfilerClosed              start() on a closed profiler
"""

from __future__ import annotations

from baml_studio.format.errors import BamlStudioError


class ProfilerError(BamlStudioError):
    """Misuse of the profiler's setup API."""


class FunctionRegistrationError(ProfilerError):
    """A BAML function name registered twice with a different Python callable."""


class ProfilerClosed(ProfilerError):
    """The profiler was closed and cannot record again."""
