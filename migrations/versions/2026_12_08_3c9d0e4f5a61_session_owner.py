"""Sessions record their caller on a shared LangGraph server: `sessions.owner`.

The owner is the identity the server authenticated (`EVOTRAINER_SERVER_TOKENS` names); sessions the owner's
own process created (the CLI) and every session recorded before this revision have none. Downgrading drops
the column: who created a session is then no longer known, and the shared server must not run on that store.

Revision ID: 3c9d0e4f5a61
Revises: 7fd02a5a7710
Create Date: 2026-12-08 00:05:00.000000

"""

from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision: str = "3c9d0e4f5a61"
down_revision: Union[str, Sequence[str], None] = "7fd02a5a7710"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    """Add the nullable `owner` column to `sessions`."""
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner", sa.String(length=255), nullable=True))


def downgrade() -> None:
    """Drop `sessions.owner`."""
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_column("owner")
