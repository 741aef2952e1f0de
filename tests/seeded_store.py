"""A migrated SQLite store with one session row (and the seed skills): what the propose node's tests start from."""

from __future__ import annotations

from pathlib import Path


def seeded_store(tmp_path: Path, session_id: str = "s0", *, seeded: bool = True) -> str:
    """The URL of a store under `tmp_path`, migrated with Alembic, holding session `session_id` and, when `seeded`,
    the seed skills."""
    from sqlalchemy.orm import Session

    from skills.repository import seed_skills
    from store import engine as store_engine
    from store import repository as store_repo

    url = f"sqlite:///{tmp_path / 'store.db'}"
    store_engine.upgrade(url)
    with Session(store_engine.make_engine(url)) as db:
        store_repo.create_session(db, session_id=session_id, harness_path="/h", repo_path="/r", max_iterations=3,
                                  max_train_steps=100, main_branch=f"evo/{session_id}/main")  # fmt: skip
        if seeded:
            seed_skills(db)
        db.commit()
    return url
