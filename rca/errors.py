"""One root for every error the tool reports to a user.

``RcaError`` is what the command-line edges and the batch runner catch: anything else is a bug
and keeps its traceback. Four branches say whose fault it is:

| branch | meaning | examples |
| --- | --- | --- |
| ``InputError`` | something the user gave us is wrong (a file, a flag, a document) | ``CaseError``, ``SettingsError``, ``DocumentError`` |
| ``DataError`` | telemetry or a stored artefact cannot be used | ``ReaderError``, ``IndexStoreError``, ``IndexMissing``, ``NoCandidates`` |
| ``BackendError`` | a model or service we call failed | ``LLMError``, ``EmbeddingModelError`` |
| ``DecisionError`` | the model's reply could not be turned into an answer | (direct child) |

The builtin mix-ins (``ValueError``, ``RuntimeError``) are kept so code written against the
builtins keeps working; new code catches the branches.
"""
from __future__ import annotations


class RcaError(Exception):
    """Root of every error the tool reports as a message rather than a traceback."""


class InputError(RcaError, ValueError):
    """A file, flag, document or request the user supplied is invalid."""


class DataError(RcaError, RuntimeError):
    """Telemetry or a stored artefact (index, manifest, knowledge store) cannot be used."""


class BackendError(RcaError, RuntimeError):
    """A model or remote service failed or answered something unusable."""


class IndexMissing(DataError):
    """The evidence index a command needs has not been built (run ``rca preprocess``)."""


class NoCandidates(DataError):
    """The evidence index holds no candidate component for a case's window."""
