"""Sessions record why they failed (issue #14): `sessions.status_reason`.

Revision ID: 5e7a1c2d9b40
Revises: baed68bafb86
Create Date: 2026-12-01 11:20:00.000000

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision: str = '5e7a1c2d9b40'
down_revision: Union[str, Sequence[str], None] = 'baed68bafb86'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    """Add the nullable `status_reason` text column to `sessions`."""
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('status_reason', sa.Text(), nullable=True))


def downgrade() -> None:
    """Drop `sessions.status_reason`."""
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.drop_column('status_reason')
