"""Skills say where they came from; cases say what was tried on which symptoms (issue 17).

- `skills.origin` (seed | learned | user, default user): seeding refreshes "seed" rows whose definition
  changed and leaves the others alone; rows named like a seed skill at this revision are marked "seed".
- `skills.source_candidate_id`: the merged candidate a learned skill was learned from.
- `cases.intervention` (indexed) and `cases.symptom_key`: the probe (or skill) a piece of negative evidence
  is about and the symptom signature it was tried on, so the same probe is not retried on the same symptoms.

Revision ID: fee96c26e3b0
Revises: 5e7a1c2d9b40
Create Date: 2026-12-01 13:47:43.569043

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision: str = 'fee96c26e3b0'
down_revision: Union[str, Sequence[str], None] = '5e7a1c2d9b40'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

# The seed skills' names at this revision (skills/seeds.py), frozen here: a migration never imports the app.
SEED_NAMES = (
    'strict-answer-extraction', 'raise-length-budget', 'std-group-filter', 'dense-auxiliary-reward',
    'never-reward-brevity', 'learnable-data-mix', 'stabilise-policy-updates',
)


def upgrade() -> None:
    """Add the columns, then mark the existing seed rows."""
    with op.batch_alter_table('cases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('intervention', sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column('symptom_key', sa.String(length=512), nullable=True))
        batch_op.create_index(batch_op.f('ix_cases_intervention'), ['intervention'], unique=False)

    with op.batch_alter_table('skills', schema=None) as batch_op:
        batch_op.add_column(sa.Column('origin', sa.Enum('seed', 'learned', 'user', name=op.f('ck_skills_origin'), native_enum=False, create_constraint=True, length=32), server_default='user', nullable=False))
        batch_op.add_column(sa.Column('source_candidate_id', sa.String(length=128), nullable=True))
        batch_op.create_foreign_key(batch_op.f('fk_skills_source_candidate_id_candidates'), 'candidates', ['source_candidate_id'], ['id'])

    skills = sa.table('skills', sa.column('name', sa.String), sa.column('origin', sa.String))
    op.execute(skills.update().where(skills.c.name.in_(SEED_NAMES)).values(origin='seed'))


def downgrade() -> None:
    """Drop the columns (the origin marks and probe keys go with them)."""
    with op.batch_alter_table('skills', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_skills_source_candidate_id_candidates'), type_='foreignkey')
        batch_op.drop_column('source_candidate_id')
        batch_op.drop_constraint(op.f('ck_skills_origin'), type_='check')  # SQLite's batch copy keeps it otherwise
        batch_op.drop_column('origin')

    with op.batch_alter_table('cases', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_cases_intervention'))
        batch_op.drop_column('symptom_key')
        batch_op.drop_column('intervention')
