"""examples/sqlalchemy_session.py: jobs written in a SQLAlchemy Session's transaction, so each
exists exactly when the rows that need it do.

Run ``CRONBASE_DATABASE_URL=postgresql://localhost/shop python -m examples.sqlalchemy_session``:
it signs up two users, one of whose welcome gifts is given up in a savepoint, commits, and
prints the queued jobs.
"""

from __future__ import annotations

import os

from sqlalchemy import create_engine, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import cronbase

DATABASE_URL = os.environ.get("CRONBASE_DATABASE_URL", "postgresql:///shop")
app = cronbase.App(DATABASE_URL)
# The same database through SQLAlchemy, on psycopg 3: the driver cronbase writes with.
engine = create_engine(make_url(DATABASE_URL).set(drivername="postgresql+psycopg"))


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str]


@app.task
def send_welcome(user_id: int) -> None:
    print(f"welcome, user {user_id}")


@app.task
def send_gift(user_id: int) -> None:
    print(f"a gift for user {user_id}")


def sign_up(session: Session, email: str, *, gift: bool) -> int:
    user = User(email=email)
    session.add(user)
    session.flush()  # gives the user an id
    send_welcome.configure(connection=session).defer(user_id=user.id)
    with session.begin_nested() as savepoint:
        send_gift.configure(connection=session).defer(user_id=user.id)
        if not gift:
            savepoint.rollback()  # the gift job goes; the user and the welcome job stay
    return user.id


if __name__ == "__main__":
    app.migrate()
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        sign_up(session, "ada@example.com", gift=True)
        sign_up(session, "bob@example.com", gift=False)
        session.commit()  # both users and their jobs, or (had it raised) none of them
    print(sorted(job.task for job in app.jobs.list()))
    # ['send_gift', 'send_welcome', 'send_welcome']
