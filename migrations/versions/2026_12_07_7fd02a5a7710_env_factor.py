"""The environment's code is an intervention factor of its own (issue 28 §4): `env` joins the factor values.

`candidates.factor` and `skills.factor` are portable string enums whose allowed values live in a CHECK
constraint (`store/types.py: enum_type`); this revision replaces both constraints with one that also allows
`env`. Downgrading refuses while a row says `env`: there is no older value that means the same thing, and
a migration never rewrites what a session recorded.

Revision ID: 7fd02a5a7710
Revises: fee96c26e3b0
Create Date: 2026-12-07 14:40:00.000000

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision: str = '7fd02a5a7710'
down_revision: Union[str, Sequence[str], None] = 'fee96c26e3b0'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

# The factor values before and after this revision (store/types.py: Factor), frozen here.
OLD = ('reward', 'filter', 'data', 'trainer', 'diagnostic')
NEW = ('reward', 'filter', 'data', 'trainer', 'diagnostic', 'env')
TABLES = ('candidates', 'skills')


def _allow(values: Sequence[str]) -> None:
    for table in TABLES:
        name = op.f(f'ck_{table}_factor')
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_constraint(name, type_='check')
            batch_op.create_check_constraint(name, sa.column('factor').in_(values))


def upgrade() -> None:
    """Allow `env` in `candidates.factor` and `skills.factor`."""
    _allow(NEW)


def downgrade() -> None:
    """Allow the old values again; refused while any row records the `env` factor."""
    bind = op.get_bind()
    for table in TABLES:
        count = bind.execute(sa.text(f"SELECT count(*) FROM {table} WHERE factor = 'env'")).scalar_one()
        if count:
            raise RuntimeError(
                f"{table}: {count} row(s) record the factor 'env', which the older schema cannot hold; "
                "delete or export them before downgrading below revision 7fd02a5a7710"
            )
    _allow(OLD)
