"""Initial store schema: every table of store/models.py (hand-reviewed autogenerate).

Revision ID: baed68bafb86
Revises:
Create Date: 2026-11-29 20:30:59.385898

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision: str = 'baed68bafb86'
down_revision: Union[str, Sequence[str], None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def _versions_run_fk_inline() -> bool:
    """Whether `versions.run_id -> runs.id` is declared inside CREATE TABLE versions.

    versions -> runs -> candidates -> versions is a cycle. SQLite accepts a foreign key to a table that
    does not exist yet but cannot ADD CONSTRAINT later (batch mode would rebuild the table from
    reflection); Postgres is the other way round. Both end with the same named constraint.
    """
    return op.get_context().dialect.name == 'sqlite'


def _versions_run_fk() -> list[sa.ForeignKeyConstraint]:
    if not _versions_run_fk_inline():
        return []
    return [sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_versions_run_id_runs'))]


def upgrade() -> None:
    """Create the store: sessions, version ledger, candidates, runs, backtests, health reports,
    diagnostics, case memory, skill library, search trace, gates and LLM usage."""
    op.create_table('sessions',
    sa.Column('id', sa.String(length=128), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('harness_path', sa.Text(), nullable=False),
    sa.Column('repo_path', sa.Text(), nullable=False),
    sa.Column('mode', sa.Enum('evotrainer', 'score-only', name=op.f('ck_sessions_mode'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('policy', sa.Enum('heuristic', 'llm', name=op.f('ck_sessions_policy'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('llm_model', sa.String(length=255), nullable=True),
    sa.Column('status', sa.Enum('running', 'finished', 'failed', 'interrupted', name=op.f('ck_sessions_status'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('max_iterations', sa.Integer(), nullable=False),
    sa.Column('max_train_steps', sa.Integer(), nullable=False),
    sa.Column('steps_used', sa.Integer(), nullable=False),
    sa.Column('wall_time_s', sa.Float(), nullable=False),
    sa.Column('main_branch', sa.String(length=255), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_sessions'))
    )
    op.create_table('diagnostic_metrics',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('source_path', sa.Text(), nullable=False),
    sa.Column('validated', sa.Boolean(), nullable=False),
    sa.Column('validation', sa.JSON(none_as_null=True), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['session_id'], ['sessions.id'], name=op.f('fk_diagnostic_metrics_session_id_sessions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_diagnostic_metrics'))
    )
    op.create_index(op.f('ix_diagnostic_metrics_session_id'), 'diagnostic_metrics', ['session_id'], unique=False)
    op.create_table('llm_usage',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('node', sa.String(length=64), nullable=False),
    sa.Column('model', sa.String(length=255), nullable=False),
    sa.Column('prompt_tokens', sa.Integer(), nullable=False),
    sa.Column('completion_tokens', sa.Integer(), nullable=False),
    sa.Column('cost_usd', sa.Float(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['session_id'], ['sessions.id'], name=op.f('fk_llm_usage_session_id_sessions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_llm_usage'))
    )
    op.create_index(op.f('ix_llm_usage_session_id'), 'llm_usage', ['session_id'], unique=False)
    op.create_table('search_trace',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('node', sa.String(length=64), nullable=False),
    sa.Column('tool', sa.String(length=64), nullable=False),
    sa.Column('query', sa.Text(), nullable=False),
    sa.Column('result_summary', sa.Text(), nullable=False),
    sa.Column('used', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['session_id'], ['sessions.id'], name=op.f('fk_search_trace_session_id_sessions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_search_trace'))
    )
    op.create_index(op.f('ix_search_trace_session_id'), 'search_trace', ['session_id'], unique=False)
    op.create_table('skills',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('domain', sa.String(length=64), nullable=False),
    sa.Column('trigger', sa.Text(), nullable=False),
    sa.Column('factor', sa.Enum('reward', 'filter', 'data', 'trainer', 'diagnostic', name=op.f('ck_skills_factor'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('patch_kind', sa.Enum('template', 'diff', name=op.f('ck_skills_patch_kind'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('patch', sa.Text(), nullable=False),
    sa.Column('params', sa.JSON(none_as_null=True), nullable=False),
    sa.Column('expected_outcome', sa.Text(), nullable=False),
    sa.Column('validation_rule', sa.Text(), nullable=False),
    sa.Column('applicability', sa.JSON(none_as_null=True), nullable=False),
    sa.Column('provenance', sa.Text(), nullable=False),
    sa.Column('wins', sa.Integer(), nullable=False),
    sa.Column('losses', sa.Integer(), nullable=False),
    sa.Column('uses', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_verified_session', sa.String(length=128), nullable=True),
    sa.ForeignKeyConstraint(['last_verified_session'], ['sessions.id'], name=op.f('fk_skills_last_verified_session_sessions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_skills')),
    sa.UniqueConstraint('name', name=op.f('uq_skills_name'))
    )
    op.create_index(op.f('ix_skills_domain'), 'skills', ['domain'], unique=False)
    op.create_table('versions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('index', sa.Integer(), nullable=False),
    sa.Column('parent_id', sa.Integer(), nullable=True),
    sa.Column('branch', sa.String(length=255), nullable=False),
    sa.Column('commit_sha', sa.String(length=64), nullable=False),
    sa.Column('config_snapshot', sa.JSON(none_as_null=True), nullable=False),
    sa.Column('diff_stat_files', sa.Integer(), nullable=False),
    sa.Column('diff_stat_insertions', sa.Integer(), nullable=False),
    sa.Column('diff_stat_deletions', sa.Integer(), nullable=False),
    sa.Column('decision', sa.Enum('keep', 'prune', 'revert', 'merge', name=op.f('ck_versions_decision'), native_enum=False, create_constraint=True, length=32), nullable=True),
    sa.Column('outcome', sa.Enum('improvement', 'regression', 'mixed', 'insufficient', name=op.f('ck_versions_outcome'), native_enum=False, create_constraint=True, length=32), nullable=True),
    sa.Column('rationale', sa.Text(), nullable=False),
    sa.Column('strict_score', sa.Float(), nullable=True),
    sa.Column('train_score', sa.Float(), nullable=True),
    sa.Column('run_id', sa.String(length=128), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['parent_id'], ['versions.id'], name=op.f('fk_versions_parent_id_versions')),
    *_versions_run_fk(),
    sa.ForeignKeyConstraint(['session_id'], ['sessions.id'], name=op.f('fk_versions_session_id_sessions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_versions')),
    sa.UniqueConstraint('session_id', 'index', name=op.f('uq_versions_session_id_index'))
    )
    op.create_index(op.f('ix_versions_session_id'), 'versions', ['session_id'], unique=False)
    op.create_table('candidates',
    sa.Column('id', sa.String(length=128), nullable=False),
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('parent_version_id', sa.Integer(), nullable=False),
    sa.Column('iteration', sa.Integer(), nullable=False),
    sa.Column('slug', sa.String(length=64), nullable=False),
    sa.Column('branch', sa.String(length=255), nullable=False),
    sa.Column('worktree_path', sa.Text(), nullable=False),
    sa.Column('hypothesis', sa.Text(), nullable=False),
    sa.Column('factor', sa.Enum('reward', 'filter', 'data', 'trainer', 'diagnostic', name=op.f('ck_candidates_factor'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('factors_declared', sa.JSON(none_as_null=True), nullable=False),
    sa.Column('justification', sa.Text(), nullable=True),
    sa.Column('success_criterion', sa.Text(), nullable=False),
    sa.Column('skill_id', sa.Integer(), nullable=True),
    sa.Column('status', sa.Enum('proposed', 'refused', 'backtested', 'backtest_failed', 'training', 'trained', 'kept', 'pruned', 'merged', 'reverted', name=op.f('ck_candidates_status'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('refusal_reason', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['parent_version_id'], ['versions.id'], name=op.f('fk_candidates_parent_version_id_versions')),
    sa.ForeignKeyConstraint(['session_id'], ['sessions.id'], name=op.f('fk_candidates_session_id_sessions')),
    sa.ForeignKeyConstraint(['skill_id'], ['skills.id'], name=op.f('fk_candidates_skill_id_skills')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_candidates')),
    sa.UniqueConstraint('branch', name=op.f('uq_candidates_branch'))
    )
    op.create_index(op.f('ix_candidates_session_id'), 'candidates', ['session_id'], unique=False)
    op.create_table('cases',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('kind', sa.Enum('pattern', 'negative_evidence', name=op.f('ck_cases_kind'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('domain', sa.String(length=64), nullable=False),
    sa.Column('signature', sa.JSON(none_as_null=True), nullable=False),
    sa.Column('summary', sa.Text(), nullable=False),
    sa.Column('candidate_id', sa.String(length=128), nullable=True),
    sa.Column('outcome', sa.Enum('improvement', 'regression', 'mixed', 'insufficient', name=op.f('ck_cases_outcome'), native_enum=False, create_constraint=True, length=32), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['candidate_id'], ['candidates.id'], name=op.f('fk_cases_candidate_id_candidates')),
    sa.ForeignKeyConstraint(['session_id'], ['sessions.id'], name=op.f('fk_cases_session_id_sessions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_cases'))
    )
    op.create_index(op.f('ix_cases_domain'), 'cases', ['domain'], unique=False)
    op.create_index(op.f('ix_cases_session_id'), 'cases', ['session_id'], unique=False)
    op.create_table('gate_requests',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('gate', sa.Enum('launch', 'promote', name=op.f('ck_gate_requests_gate'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('candidate_id', sa.String(length=128), nullable=True),
    sa.Column('payload', sa.JSON(none_as_null=True), nullable=False),
    sa.Column('status', sa.Enum('pending', 'approved', 'rejected', name=op.f('ck_gate_requests_status'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('note', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('answered_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['candidate_id'], ['candidates.id'], name=op.f('fk_gate_requests_candidate_id_candidates')),
    sa.ForeignKeyConstraint(['session_id'], ['sessions.id'], name=op.f('fk_gate_requests_session_id_sessions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_gate_requests'))
    )
    op.create_index(op.f('ix_gate_requests_session_id'), 'gate_requests', ['session_id'], unique=False)
    op.create_table('runs',
    sa.Column('id', sa.String(length=128), nullable=False),
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('candidate_id', sa.String(length=128), nullable=True),
    sa.Column('version_id', sa.Integer(), nullable=True),
    sa.Column('backend', sa.Enum('local', 'verl', name=op.f('ck_runs_backend'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('kind', sa.Enum('pilot', 'full', name=op.f('ck_runs_kind'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('seed', sa.Integer(), nullable=False),
    sa.Column('steps', sa.Integer(), nullable=False),
    sa.Column('artefact_dir', sa.Text(), nullable=False),
    sa.Column('status', sa.Enum('submitted', 'running', 'finished', 'lost', name=op.f('ck_runs_status'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('outcome', sa.Enum('ok', 'candidate_error', 'infra_error', 'timeout', 'spoof_detected', name=op.f('ck_runs_outcome'), native_enum=False, create_constraint=True, length=32), nullable=True),
    sa.Column('strict_acc', sa.Float(), nullable=True),
    sa.Column('train_reward', sa.Float(), nullable=True),
    sa.Column('wall_time_s', sa.Float(), nullable=True),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['candidate_id'], ['candidates.id'], name=op.f('fk_runs_candidate_id_candidates')),
    sa.ForeignKeyConstraint(['session_id'], ['sessions.id'], name=op.f('fk_runs_session_id_sessions')),
    sa.ForeignKeyConstraint(['version_id'], ['versions.id'], name=op.f('fk_runs_version_id_versions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_runs'))
    )
    if not _versions_run_fk_inline():
        op.create_foreign_key(op.f('fk_versions_run_id_runs'), 'versions', 'runs', ['run_id'], ['id'])
    op.create_index(op.f('ix_runs_candidate_id'), 'runs', ['candidate_id'], unique=False)
    op.create_index(op.f('ix_runs_session_id'), 'runs', ['session_id'], unique=False)
    op.create_index(op.f('ix_runs_version_id'), 'runs', ['version_id'], unique=False)
    op.create_table('skill_uses',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('skill_id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('candidate_id', sa.String(length=128), nullable=True),
    sa.Column('matched_metrics', sa.JSON(none_as_null=True), nullable=False),
    sa.Column('result', sa.Enum('win', 'loss', 'pending', name=op.f('ck_skill_uses_result'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['candidate_id'], ['candidates.id'], name=op.f('fk_skill_uses_candidate_id_candidates')),
    sa.ForeignKeyConstraint(['session_id'], ['sessions.id'], name=op.f('fk_skill_uses_session_id_sessions')),
    sa.ForeignKeyConstraint(['skill_id'], ['skills.id'], name=op.f('fk_skill_uses_skill_id_skills')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_skill_uses'))
    )
    op.create_index(op.f('ix_skill_uses_session_id'), 'skill_uses', ['session_id'], unique=False)
    op.create_index(op.f('ix_skill_uses_skill_id'), 'skill_uses', ['skill_id'], unique=False)
    op.create_table('backtests',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('candidate_id', sa.String(length=128), nullable=False),
    sa.Column('rollouts_run_id', sa.String(length=128), nullable=False),
    sa.Column('artefact_dir', sa.Text(), nullable=False),
    sa.Column('verdict', sa.Enum('pass', 'fail', 'inconclusive', name=op.f('ck_backtests_verdict'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('outcome', sa.Enum('ok', 'candidate_error', 'infra_error', 'timeout', 'spoof_detected', name=op.f('ck_backtests_outcome'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('dead_group_ratio_before', sa.Float(), nullable=True),
    sa.Column('dead_group_ratio_after', sa.Float(), nullable=True),
    sa.Column('rank_violations_before', sa.Integer(), nullable=True),
    sa.Column('rank_violations_after', sa.Integer(), nullable=True),
    sa.Column('kept_ratio', sa.Float(), nullable=True),
    sa.Column('hack_max_score', sa.Float(), nullable=True),
    sa.Column('reasons', sa.JSON(none_as_null=True), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['candidate_id'], ['candidates.id'], name=op.f('fk_backtests_candidate_id_candidates')),
    sa.ForeignKeyConstraint(['rollouts_run_id'], ['runs.id'], name=op.f('fk_backtests_rollouts_run_id_runs')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_backtests'))
    )
    op.create_index(op.f('ix_backtests_candidate_id'), 'backtests', ['candidate_id'], unique=False)
    op.create_table('health_reports',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('run_id', sa.String(length=128), nullable=False),
    sa.Column('version_id', sa.Integer(), nullable=True),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('n_critical', sa.Integer(), nullable=False),
    sa.Column('n_warning', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_health_reports_run_id_runs')),
    sa.ForeignKeyConstraint(['session_id'], ['sessions.id'], name=op.f('fk_health_reports_session_id_sessions')),
    sa.ForeignKeyConstraint(['version_id'], ['versions.id'], name=op.f('fk_health_reports_version_id_versions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_health_reports'))
    )
    op.create_index(op.f('ix_health_reports_run_id'), 'health_reports', ['run_id'], unique=False)
    op.create_index(op.f('ix_health_reports_session_id'), 'health_reports', ['session_id'], unique=False)
    op.create_table('findings',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('report_id', sa.Integer(), nullable=False),
    sa.Column('alert_id', sa.String(length=64), nullable=False),
    sa.Column('layer', sa.Enum('score', 'signal', 'behaviour', 'version', name=op.f('ck_findings_layer'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('severity', sa.Enum('ok', 'warning', 'critical', name=op.f('ck_findings_severity'), native_enum=False, create_constraint=True, length=32), nullable=False),
    sa.Column('value', sa.Float(), nullable=True),
    sa.Column('threshold', sa.Float(), nullable=True),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('evidence', sa.JSON(none_as_null=True), nullable=False),
    sa.ForeignKeyConstraint(['report_id'], ['health_reports.id'], name=op.f('fk_findings_report_id_health_reports'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_findings'))
    )
    op.create_index(op.f('ix_findings_alert_id'), 'findings', ['alert_id'], unique=False)
    op.create_index(op.f('ix_findings_report_id'), 'findings', ['report_id'], unique=False)


def downgrade() -> None:
    """Drop every store table (LangGraph's checkpoint tables, if any, are not ours and stay)."""
    if not _versions_run_fk_inline():
        op.drop_constraint(op.f('fk_versions_run_id_runs'), 'versions', type_='foreignkey')
    for table in (
        'findings', 'health_reports', 'backtests', 'skill_uses', 'runs', 'gate_requests', 'cases',
        'candidates', 'versions', 'skills', 'search_trace', 'llm_usage', 'diagnostic_metrics', 'sessions',
    ):
        op.drop_table(table)
