"""Alembic environment: run programmatically by judge.server.store.upgrade with an open connection."""
from __future__ import annotations

from alembic import context

from judge.server.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
