"""examples/fastapi_app.py: a FastAPI app that enqueues in the request's own database
transaction, with the cronbase dashboard mounted at /jobs-admin.

    export CRONBASE_DATABASE_URL=postgresql://localhost/shop
    uvicorn examples.fastapi_app:api                     # the web app
    cronbase worker --app examples.fastapi_app:app       # runs the jobs it defers

POST /orders stores an order and defers its confirmation in one transaction, so the job exists
exactly when the order does. An order the card cannot pay is refused after the defer: the
rollback takes the job with it. Needs fastapi, sqlalchemy[asyncio] and cronbase[dashboard].
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import cronbase
from cronbase.dashboard import Credentials, create_app

DATABASE_URL = os.environ.get("CRONBASE_DATABASE_URL", "postgresql:///shop")
app = cronbase.App(DATABASE_URL)
# The same database through SQLAlchemy, on psycopg 3: the driver cronbase writes with.
engine = create_async_engine(make_url(DATABASE_URL).set(drivername="postgresql+psycopg"))
Session = async_sessionmaker(engine, expire_on_commit=False)
CARD_LIMIT_CENTS = 500_00


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str]
    amount_cents: Mapped[int]


@app.task(queue="emails")
def send_confirmation(order_id: int) -> None:
    print(f"order {order_id} confirmed")


@asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    await app.migrate_async()  # here for the example; in production, `cronbase migrate` at deploy
    async with engine.begin() as connection:
        await connection.run_sync(Base.metadata.create_all)
    await app.async_pool()  # opened at start: a wrong URL fails here, not on the first request
    yield
    await app.aclose()
    await engine.dispose()


async def transaction() -> AsyncIterator[AsyncSession]:
    """The request's transaction: committed when the endpoint returns, rolled back if it raises."""
    async with Session() as session, session.begin():
        yield session


# scope="function": commit before the response is sent, so a 201 means the order and its job
# are stored (the default scope would commit after the client has its answer).
Transaction = Annotated[AsyncSession, Depends(transaction, scope="function")]

api = FastAPI(lifespan=lifespan)
# Without CRONBASE_DASHBOARD_TOKEN (or _USER and _PASSWORD) it answers this machine only.
api.mount("/jobs-admin", create_app(app, auth=Credentials.from_env()))


class NewOrder(BaseModel):
    item: str
    amount_cents: int


@api.post("/orders", status_code=201)
async def place_order(new: NewOrder, session: Transaction) -> dict[str, int]:
    order = Order(item=new.item, amount_cents=new.amount_cents)
    session.add(order)
    await session.flush()  # gives the order its id
    job_id = await send_confirmation.configure(connection=session).defer_async(order_id=order.id)
    if order.amount_cents > CARD_LIMIT_CENTS:
        # Refused after the defer: the rollback removes the order and the job together.
        raise HTTPException(402, f"card declined for {order.amount_cents} cents")
    return {"order_id": order.id, "job_id": job_id}
