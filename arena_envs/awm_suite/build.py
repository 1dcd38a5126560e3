"""Writes Arena's small AWM suite: `python arena_envs/awm_suite/build.py` (the JSONL files ship).

Twelve everyday apps (a shop, a library, a calendar, a clinic, a bank, ...) in exactly the
format of Agent World Model's pipeline (see `arena_envs.awm_data`), sized for a CPU: two or
three tables of a few rows each, five or six tools, tasks that need one to three calls. Each
scenario is written here as data (tables, rows, routes, tasks) and turned into what AWM's stages
produce: DDL and INSERT statements, a FastAPI app over SQLAlchemy (`full_code`, one route per
tool, named by `operation_id`) and, per task, a pure-code verifier
`verify_task_completion(initial_db_path, final_db_path, final_answer=None)` that compares the
two databases (and the final answer, for questions).

`oracle.jsonl` holds, for every task, the tool calls that solve it and a final answer: the
scripted demonstrations for a cold start (training scenarios only), and the proof, replayed by
tests/envs/test_awm_suite.py through the real environment, that every task is solvable.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
PY = {"INTEGER": "int", "REAL": "float", "TEXT": "str"}
SA = {"INTEGER": "Integer", "REAL": "Float", "TEXT": "String"}


@dataclass
class Table:
    name: str
    model: str  # SQLAlchemy class name
    key: str  # path parameter of one row (`book_id`)
    columns: list[tuple[str, str, Any]]  # (name, INTEGER|REAL|TEXT, default or ... = required)
    rows: list[tuple[Any, ...]]  # values for the columns after `id`


@dataclass
class Route:
    kind: str  # search | list | get | create | update | delete
    table: str
    op: str  # operation_id: the tool's name
    summary: str
    fields: list[str] = field(default_factory=list)  # search: [field]; list: filters; body


@dataclass
class Task:
    text: str
    checks: list[dict[str, Any]]
    calls: list[tuple[str, dict[str, Any]]]
    answer: str = "Done."


@dataclass
class App:
    name: str
    description: str
    title: str
    tables: list[Table]
    routes: list[Route]
    tasks: list[Task]


# -- what each stage writes ---------------------------------------------------------------------
def ddl(t: Table) -> str:
    cols = ["    id INTEGER PRIMARY KEY AUTOINCREMENT"]
    for name, kind, default in t.columns:
        extra = " NOT NULL" if default is ... else f" DEFAULT {_sql(default)}"
        cols.append(f"    {name} {kind}{extra}")
    return f"CREATE TABLE {t.name} (\n" + ",\n".join(cols) + "\n);"


def _sql(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def inserts(t: Table) -> list[str]:
    names = ", ".join(["id"] + [c[0] for c in t.columns])
    return [
        f"INSERT INTO {t.name} ({names}) VALUES ({', '.join(_sql(v) for v in (i, *row))});"
        for i, row in enumerate(t.rows, 1)
    ]


def full_code(app: App) -> str:
    """The scenario's FastAPI app, written the way AWM's generated servers are."""
    tables = {t.name: t for t in app.tables}
    out = [
        "from typing import List, Optional",
        "",
        "from fastapi import Body, FastAPI, HTTPException, Path, Query",
        "from pydantic import BaseModel, Field",
        "from sqlalchemy import Column, Float, Integer, String, create_engine",
        "from sqlalchemy.orm import declarative_base, sessionmaker",
        "",
        f'engine = create_engine("sqlite:///{app.name}.db", connect_args={{"check_same_thread": False}})',
        "SessionLocal = sessionmaker(bind=engine, autoflush=False, autocommit=False)",
        "Base = declarative_base()",
        "",
    ]
    for t in app.tables:
        out += ["", f"class {t.model}(Base):", f'    __tablename__ = "{t.name}"']
        out.append("    id = Column(Integer, primary_key=True, autoincrement=True)")
        for name, kind, default in t.columns:
            arg = "nullable=False" if default is ... else f"default={default!r}"
            out.append(f"    {name} = Column({SA[kind]}, {arg})")
        out += [
            "",
            "    def as_dict(self):",
            "        return {c.name: getattr(self, c.name) for c in self.__table__.columns}",
        ]
    out += ["", "", "Base.metadata.create_all(engine)", f'app = FastAPI(title="{app.title}")', ""]
    for r in app.routes:
        t = tables[r.table]
        types = {c[0]: c[1] for c in t.columns}
        defaults = {c[0]: c[2] for c in t.columns}
        body = f"{r.op.title().replace('_', '')}Body"
        if r.kind in ("create", "update"):
            out += ["", f"class {body}(BaseModel):"]
            for name in r.fields:
                py = PY[types[name]]
                if r.kind == "update" or defaults[name] is not ...:
                    dflt = "None" if r.kind == "update" else repr(defaults[name])
                    out.append(
                        f'    {name}: Optional[{py}] = Field({dflt}, description="{name.replace("_", " ")}")'
                    )
                else:
                    out.append(
                        f'    {name}: {py} = Field(..., description="{name.replace("_", " ")}")'
                    )
        deco = {
            "search": "get",
            "list": "get",
            "get": "get",
            "create": "post",
            "update": "patch",
            "delete": "delete",
        }[r.kind]
        path = f"/api/{t.name}" + ("/search" if r.kind == "search" else "")
        if r.kind in ("get", "update", "delete"):
            path += "/{" + t.key + "}"
        out += ["", f'@app.{deco}("{path}", summary="{r.summary}", operation_id="{r.op}")']
        if r.kind == "search":
            f0 = r.fields[0]
            out += [
                f'def {r.op}({f0}: str = Query(..., description="part of the {f0.replace("_", " ")}")):',
                "    session = SessionLocal()",
                f'    rows = session.query({t.model}).filter({t.model}.{f0}.ilike(f"%{{{f0}}}%")).all()',
                "    session.close()",
                f'    return {{"{t.name}": [r.as_dict() for r in rows]}}',
            ]
        elif r.kind == "list":
            params = ", ".join(
                f'{f}: Optional[{PY[types[f]]}] = Query(None, description="only this {f.replace("_", " ")}")'
                for f in r.fields
            )
            out += [
                f"def {r.op}({params}):",
                "    session = SessionLocal()",
                f"    q = session.query({t.model})",
            ]
            for f in r.fields:
                out += [f"    if {f} is not None:", f"        q = q.filter({t.model}.{f} == {f})"]
            out += [
                "    rows = q.order_by(" + f"{t.model}.id).all()",
                "    session.close()",
                f'    return {{"{t.name}": [r.as_dict() for r in rows]}}',
            ]
        elif r.kind == "get":
            out += [
                f'def {r.op}({t.key}: int = Path(..., description="id of the {t.model.lower()}")):',
                "    session = SessionLocal()",
                f"    row = session.get({t.model}, {t.key})",
                "    session.close()",
                "    if row is None:",
                f'        raise HTTPException(status_code=404, detail="{t.model.lower()} not found")',
                "    return row.as_dict()",
            ]
        elif r.kind == "create":
            out += [
                f"def {r.op}(body: {body} = Body(...)):",
                "    session = SessionLocal()",
                f"    row = {t.model}(**body.model_dump())",
                "    session.add(row)",
                "    session.commit()",
                "    result = row.as_dict()",
                "    session.close()",
                "    return result",
            ]
        elif r.kind == "update":
            out += [
                f'def {r.op}({t.key}: int = Path(..., description="id of the {t.model.lower()}"), body: {body} = Body(...)):',
                "    session = SessionLocal()",
                f"    row = session.get({t.model}, {t.key})",
                "    if row is None:",
                "        session.close()",
                f'        raise HTTPException(status_code=404, detail="{t.model.lower()} not found")',
                "    for key, value in body.model_dump(exclude_none=True).items():",
                "        setattr(row, key, value)",
                "    session.commit()",
                "    result = row.as_dict()",
                "    session.close()",
                "    return result",
            ]
        else:
            out += [
                f'def {r.op}({t.key}: int = Path(..., description="id of the {t.model.lower()}")):',
                "    session = SessionLocal()",
                f"    row = session.get({t.model}, {t.key})",
                "    if row is None:",
                "        session.close()",
                f'        raise HTTPException(status_code=404, detail="{t.model.lower()} not found")',
                "    session.delete(row)",
                "    session.commit()",
                "    session.close()",
                '    return {"deleted": True}',
            ]
    out += [
        "",
        "",
        'if __name__ == "__main__":',
        "    import uvicorn",
        "",
        '    uvicorn.run(app, host="127.0.0.1", port=8000)',
        "",
    ]
    return "\n".join(out)


VERIFIER = '''
def verify_task_completion(initial_db_path: str, final_db_path: str, final_answer: str | None = None) -> dict:
    """{doc}"""
    import sqlite3

    checks = {checks}

    def rows(path, table):
        conn = sqlite3.connect(f"file:{{path}}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        try:
            return {{r["id"]: dict(r) for r in conn.execute(f"SELECT * FROM {{table}}")}}
        finally:
            conn.close()

    def same(a, b):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return abs(float(a) - float(b)) < 1e-6
        return str(a).strip().lower() == str(b).strip().lower()

    for check in checks:
        kind = check["kind"]
        if kind == "answer":
            text = (final_answer or "").lower()
            if not all(str(part).lower() in text for part in check["contains"]):
                return {{"result": "others"}}
            continue
        before, after = rows(initial_db_path, check["table"]), rows(final_db_path, check["table"])
        if kind == "new_row":
            new = [r for i, r in after.items() if i not in before]
            if not any(all(same(r.get(k), v) for k, v in check["match"].items()) for r in new):
                return {{"result": "others"}}
        elif kind == "field":
            row, old = after.get(check["id"]), before.get(check["id"])
            if row is None or not same(row.get(check["col"]), check["value"]):
                return {{"result": "others"}}
            if old is not None and same(old.get(check["col"]), check["value"]):
                return {{"result": "others"}}
        elif kind == "gone":
            if check["id"] in after or check["id"] not in before:
                return {{"result": "others"}}
        elif kind == "count":
            if len(after) != check["value"]:
                return {{"result": "others"}}
    return {{"result": "complete"}}
'''


def verifier(task: Task) -> str:
    doc = "Checks: " + task.text.replace('"', "'")
    return textwrap.dedent(VERIFIER).strip().format(doc=doc, checks=repr(task.checks)) + "\n"


def new_row(table: str, **match: Any) -> dict[str, Any]:
    return {"kind": "new_row", "table": table, "match": match}


def set_field(table: str, id_: int, col: str, value: Any) -> dict[str, Any]:
    return {"kind": "field", "table": table, "id": id_, "col": col, "value": value}


def gone(table: str, id_: int) -> dict[str, Any]:
    return {"kind": "gone", "table": table, "id": id_}


def says(*parts: Any) -> dict[str, Any]:
    return {"kind": "answer", "contains": [str(p) for p in parts]}


# -- the apps -----------------------------------------------------------------------------------
R = ...  # a required column
APPS: list[App] = [
    App(
        "shop",
        "An online shop: products with prices and stock, and the user's cart.",
        "Shop API",
        [
            Table(
                "products",
                "Product",
                "product_id",
                [("name", "TEXT", R), ("price", "REAL", R), ("stock", "INTEGER", R)],
                [
                    ("USB-C cable", 9.99, 40),
                    ("Desk lamp", 24.5, 12),
                    ("Coffee mug", 7.25, 30),
                    ("Notebook", 3.4, 100),
                ],
            ),
            Table(
                "cart_items",
                "CartItem",
                "item_id",
                [("product_id", "INTEGER", R), ("quantity", "INTEGER", 1)],
                [(3, 2)],
            ),
        ],
        [
            Route("search", "products", "search_products", "Find products by name", ["name"]),
            Route("get", "products", "get_product", "One product by id"),
            Route("list", "cart_items", "list_cart", "The items in my cart", []),
            Route(
                "create",
                "cart_items",
                "add_to_cart",
                "Put a product in my cart",
                ["product_id", "quantity"],
            ),
            Route(
                "update",
                "cart_items",
                "update_cart_item",
                "Change a cart item's quantity",
                ["quantity"],
            ),
            Route("delete", "cart_items", "remove_from_cart", "Take an item out of my cart"),
        ],
        [
            Task(
                "Add the desk lamp (product 2) to my cart.",
                [new_row("cart_items", product_id=2)],
                [("add_to_cart", {"product_id": 2})],
            ),
            Task(
                "Add 3 notebooks to my cart. The notebook is product 4.",
                [new_row("cart_items", product_id=4, quantity=3)],
                [("add_to_cart", {"product_id": 4, "quantity": 3})],
            ),
            Task(
                "Find the USB-C cable and put one in my cart.",
                [new_row("cart_items", product_id=1)],
                [("search_products", {"name": "USB-C"}), ("add_to_cart", {"product_id": 1})],
            ),
            Task(
                "Remove cart item 1 from my cart.",
                [gone("cart_items", 1)],
                [("remove_from_cart", {"item_id": 1})],
            ),
            Task(
                "Change the quantity of cart item 1 to 5.",
                [set_field("cart_items", 1, "quantity", 5)],
                [("update_cart_item", {"item_id": 1, "quantity": 5})],
            ),
            Task(
                "What is the price of the coffee mug? Answer with the number.",
                [says("7.25")],
                [("search_products", {"name": "mug"})],
                "The coffee mug costs 7.25.",
            ),
            Task(
                "Add the coffee mug (product 3) to my cart.",
                [new_row("cart_items", product_id=3)],
                [("add_to_cart", {"product_id": 3})],
            ),
            Task(
                "Add 2 USB-C cables to my cart. The cable is product 1.",
                [new_row("cart_items", product_id=1, quantity=2)],
                [("add_to_cart", {"product_id": 1, "quantity": 2})],
            ),
            Task(
                "Change the quantity of cart item 1 to 1.",
                [set_field("cart_items", 1, "quantity", 1)],
                [("update_cart_item", {"item_id": 1, "quantity": 1})],
            ),
            Task(
                "How much does the desk lamp cost? Answer with the number.",
                [says("24.5")],
                [("search_products", {"name": "lamp"})],
                "The desk lamp costs 24.5.",
            ),
        ],
    ),
    App(
        "library",
        "A town library: its books and the loans of its members.",
        "Library API",
        [
            Table(
                "books",
                "Book",
                "book_id",
                [("title", "TEXT", R), ("author", "TEXT", R), ("available", "INTEGER", 1)],
                [
                    ("Dune", "Frank Herbert", 1),
                    ("Emma", "Jane Austen", 1),
                    ("Ulysses", "James Joyce", 0),
                    ("Beloved", "Toni Morrison", 1),
                ],
            ),
            Table(
                "loans",
                "Loan",
                "loan_id",
                [("book_id", "INTEGER", R), ("member", "TEXT", R), ("returned", "INTEGER", 0)],
                [(3, "ana", 0)],
            ),
        ],
        [
            Route("search", "books", "search_books", "Find books by title", ["title"]),
            Route("list", "books", "list_books", "Books, optionally by author", ["author"]),
            Route(
                "create", "loans", "borrow_book", "Lend a book to a member", ["book_id", "member"]
            ),
            Route("update", "loans", "update_loan", "Mark a loan returned", ["returned"]),
            Route(
                "update", "books", "set_availability", "Mark a book available or not", ["available"]
            ),
        ],
        [
            Task(
                "Lend book 2 to the member 'ben'.",
                [new_row("loans", book_id=2, member="ben")],
                [("borrow_book", {"book_id": 2, "member": "ben"})],
            ),
            Task(
                "Find 'Dune' and lend it to the member 'cleo'.",
                [new_row("loans", book_id=1, member="cleo")],
                [
                    ("search_books", {"title": "Dune"}),
                    ("borrow_book", {"book_id": 1, "member": "cleo"}),
                ],
            ),
            Task(
                "Loan 1 came back: mark it returned (returned = 1).",
                [set_field("loans", 1, "returned", 1)],
                [("update_loan", {"loan_id": 1, "returned": 1})],
            ),
            Task(
                "Mark book 4 as not available (available = 0).",
                [set_field("books", 4, "available", 0)],
                [("set_availability", {"book_id": 4, "available": 0})],
            ),
            Task(
                "Who wrote 'Beloved'? Answer with the author's name.",
                [says("Morrison")],
                [("search_books", {"title": "Beloved"})],
                "Toni Morrison wrote Beloved.",
            ),
            Task(
                "Loan 1 was returned: mark the loan returned and make book 3 available again.",
                [set_field("loans", 1, "returned", 1), set_field("books", 3, "available", 1)],
                [
                    ("update_loan", {"loan_id": 1, "returned": 1}),
                    ("set_availability", {"book_id": 3, "available": 1}),
                ],
            ),
            Task(
                "Lend book 4 to the member 'dev'.",
                [new_row("loans", book_id=4, member="dev")],
                [("borrow_book", {"book_id": 4, "member": "dev"})],
            ),
            Task(
                "Mark book 1 as not available (available = 0).",
                [set_field("books", 1, "available", 0)],
                [("set_availability", {"book_id": 1, "available": 0})],
            ),
            Task(
                "Make book 3 available again (available = 1).",
                [set_field("books", 3, "available", 1)],
                [("set_availability", {"book_id": 3, "available": 1})],
            ),
            Task(
                "Who wrote 'Emma'? Answer with the author's name.",
                [says("Austen")],
                [("search_books", {"title": "Emma"})],
                "Jane Austen wrote Emma.",
            ),
        ],
    ),
    App(
        "calendar",
        "A personal calendar of events with dates, times and places.",
        "Calendar API",
        [
            Table(
                "events",
                "Event",
                "event_id",
                [
                    ("title", "TEXT", R),
                    ("date", "TEXT", R),
                    ("start", "TEXT", R),
                    ("place", "TEXT", ""),
                ],
                [
                    ("Dentist", "2025-03-04", "09:30", "Main St"),
                    ("Team sync", "2025-03-05", "10:00", "Room 2"),
                    ("Yoga", "2025-03-06", "18:00", "Gym"),
                ],
            ),
        ],
        [
            Route("list", "events", "list_events", "Events, optionally on one date", ["date"]),
            Route("search", "events", "find_events", "Find events by title", ["title"]),
            Route(
                "create",
                "events",
                "create_event",
                "Add an event",
                ["title", "date", "start", "place"],
            ),
            Route("update", "events", "reschedule_event", "Move an event", ["date", "start"]),
            Route("delete", "events", "cancel_event", "Cancel an event"),
        ],
        [
            Task(
                "Add an event 'Lunch with Sam' on 2025-03-07 at 12:30.",
                [new_row("events", title="Lunch with Sam", date="2025-03-07", start="12:30")],
                [
                    (
                        "create_event",
                        {"title": "Lunch with Sam", "date": "2025-03-07", "start": "12:30"},
                    )
                ],
            ),
            Task("Cancel event 3.", [gone("events", 3)], [("cancel_event", {"event_id": 3})]),
            Task(
                "Move event 2 to 11:00 on the same day (2025-03-05).",
                [set_field("events", 2, "start", "11:00")],
                [("reschedule_event", {"event_id": 2, "date": "2025-03-05", "start": "11:00"})],
            ),
            Task(
                "Find the dentist appointment and cancel it.",
                [gone("events", 1)],
                [("find_events", {"title": "Dentist"}), ("cancel_event", {"event_id": 1})],
            ),
            Task(
                "Where is the yoga class? Answer with the place.",
                [says("Gym")],
                [("find_events", {"title": "Yoga"})],
                "Yoga is at the Gym.",
            ),
            Task(
                "Add 'Book club' on 2025-03-08 at 19:00 at the Library.",
                [
                    new_row(
                        "events",
                        title="Book club",
                        date="2025-03-08",
                        start="19:00",
                        place="Library",
                    )
                ],
                [
                    (
                        "create_event",
                        {
                            "title": "Book club",
                            "date": "2025-03-08",
                            "start": "19:00",
                            "place": "Library",
                        },
                    )
                ],
            ),
            Task("Cancel event 2.", [gone("events", 2)], [("cancel_event", {"event_id": 2})]),
            Task(
                "Add an event 'Call mom' on 2025-03-09 at 20:00.",
                [new_row("events", title="Call mom", date="2025-03-09", start="20:00")],
                [("create_event", {"title": "Call mom", "date": "2025-03-09", "start": "20:00"})],
            ),
            Task(
                "Move event 1 to 2025-03-10 at 09:30.",
                [set_field("events", 1, "date", "2025-03-10")],
                [("reschedule_event", {"event_id": 1, "date": "2025-03-10", "start": "09:30"})],
            ),
            Task(
                "When does the team sync start? Answer with the time.",
                [says("10:00")],
                [("find_events", {"title": "Team sync"})],
                "The team sync starts at 10:00.",
            ),
        ],
    ),
    App(
        "clinic",
        "A clinic's doctors and patient appointments.",
        "Clinic API",
        [
            Table(
                "doctors",
                "Doctor",
                "doctor_id",
                [("name", "TEXT", R), ("specialty", "TEXT", R)],
                [
                    ("Dr. Lee", "cardiology"),
                    ("Dr. Park", "dermatology"),
                    ("Dr. Diaz", "pediatrics"),
                ],
            ),
            Table(
                "appointments",
                "Appointment",
                "appointment_id",
                [
                    ("doctor_id", "INTEGER", R),
                    ("patient", "TEXT", R),
                    ("day", "TEXT", R),
                    ("status", "TEXT", "booked"),
                ],
                [(1, "Mia", "2025-04-01", "booked"), (2, "Noah", "2025-04-02", "booked")],
            ),
        ],
        [
            Route(
                "list", "doctors", "list_doctors", "Doctors, optionally by specialty", ["specialty"]
            ),
            Route(
                "create",
                "appointments",
                "book_appointment",
                "Book an appointment",
                ["doctor_id", "patient", "day"],
            ),
            Route("get", "appointments", "get_appointment", "One appointment"),
            Route(
                "update",
                "appointments",
                "set_appointment_status",
                "Change an appointment's status",
                ["status"],
            ),
        ],
        [
            Task(
                "Book patient 'Eva' with doctor 3 on 2025-04-03.",
                [new_row("appointments", doctor_id=3, patient="Eva", day="2025-04-03")],
                [("book_appointment", {"doctor_id": 3, "patient": "Eva", "day": "2025-04-03"})],
            ),
            Task(
                "Cancel appointment 2 (set its status to 'cancelled').",
                [set_field("appointments", 2, "status", "cancelled")],
                [("set_appointment_status", {"appointment_id": 2, "status": "cancelled"})],
            ),
            Task(
                "Book 'Liam' with the dermatologist on 2025-04-05.",
                [new_row("appointments", doctor_id=2, patient="Liam", day="2025-04-05")],
                [
                    ("list_doctors", {"specialty": "dermatology"}),
                    ("book_appointment", {"doctor_id": 2, "patient": "Liam", "day": "2025-04-05"}),
                ],
            ),
            Task(
                "Mark appointment 1 as 'done'.",
                [set_field("appointments", 1, "status", "done")],
                [("set_appointment_status", {"appointment_id": 1, "status": "done"})],
            ),
            Task(
                "Which doctor is the cardiologist? Answer with the name.",
                [says("Lee")],
                [("list_doctors", {"specialty": "cardiology"})],
                "Dr. Lee is the cardiologist.",
            ),
        ],
    ),
    App(
        "bank",
        "A bank account holder's accounts and transfers.",
        "Bank API",
        [
            Table(
                "accounts",
                "Account",
                "account_id",
                [
                    ("owner", "TEXT", R),
                    ("kind", "TEXT", R),
                    ("balance", "REAL", R),
                    ("frozen", "INTEGER", 0),
                ],
                [
                    ("me", "checking", 1200.0, 0),
                    ("me", "savings", 5000.0, 0),
                    ("landlord", "checking", 300.0, 0),
                ],
            ),
            Table(
                "transfers",
                "Transfer",
                "transfer_id",
                [
                    ("from_account", "INTEGER", R),
                    ("to_account", "INTEGER", R),
                    ("amount", "REAL", R),
                    ("memo", "TEXT", ""),
                ],
                [(1, 3, 800.0, "rent")],
            ),
        ],
        [
            Route("list", "accounts", "list_accounts", "Accounts, optionally by owner", ["owner"]),
            Route("get", "accounts", "get_account", "One account"),
            Route(
                "create",
                "transfers",
                "make_transfer",
                "Record a transfer",
                ["from_account", "to_account", "amount", "memo"],
            ),
            Route(
                "update", "accounts", "update_account", "Freeze or unfreeze an account", ["frozen"]
            ),
        ],
        [
            Task(
                "Transfer 150 from account 1 to account 3 with the memo 'utilities'.",
                [new_row("transfers", from_account=1, to_account=3, amount=150, memo="utilities")],
                [
                    (
                        "make_transfer",
                        {"from_account": 1, "to_account": 3, "amount": 150, "memo": "utilities"},
                    )
                ],
            ),
            Task(
                "Freeze account 2 (frozen = 1).",
                [set_field("accounts", 2, "frozen", 1)],
                [("update_account", {"account_id": 2, "frozen": 1})],
            ),
            Task(
                "Move 500 from my savings account (2) to my checking account (1).",
                [new_row("transfers", from_account=2, to_account=1, amount=500)],
                [("make_transfer", {"from_account": 2, "to_account": 1, "amount": 500})],
            ),
            Task(
                "What is the balance of account 2? Answer with the number.",
                [says("5000")],
                [("get_account", {"account_id": 2})],
                "Account 2 holds 5000.0.",
            ),
            Task(
                "Pay the landlord (account 3) 800 from account 1 with the memo 'rent'.",
                [
                    new_row("transfers", from_account=1, to_account=3, amount=800, memo="rent"),
                    {"kind": "count", "table": "transfers", "value": 2},
                ],
                [
                    (
                        "make_transfer",
                        {"from_account": 1, "to_account": 3, "amount": 800, "memo": "rent"},
                    )
                ],
            ),
        ],
    ),
    App(
        "restaurant",
        "A restaurant's tables and reservations.",
        "Reservations API",
        [
            Table(
                "tables",
                "DiningTable",
                "table_id",
                [("seats", "INTEGER", R), ("area", "TEXT", R)],
                [(2, "window"), (4, "patio"), (6, "main")],
            ),
            Table(
                "reservations",
                "Reservation",
                "reservation_id",
                [
                    ("table_id", "INTEGER", R),
                    ("guest", "TEXT", R),
                    ("time", "TEXT", R),
                    ("party", "INTEGER", 2),
                ],
                [(1, "Kim", "19:00", 2)],
            ),
        ],
        [
            Route("list", "tables", "list_tables", "Tables, optionally by area", ["area"]),
            Route(
                "create",
                "reservations",
                "reserve_table",
                "Reserve a table",
                ["table_id", "guest", "time", "party"],
            ),
            Route(
                "update",
                "reservations",
                "change_reservation",
                "Change a reservation",
                ["time", "party"],
            ),
            Route("delete", "reservations", "cancel_reservation", "Cancel a reservation"),
        ],
        [
            Task(
                "Reserve table 2 for 'Omar' at 20:00, party of 4.",
                [new_row("reservations", table_id=2, guest="Omar", time="20:00", party=4)],
                [("reserve_table", {"table_id": 2, "guest": "Omar", "time": "20:00", "party": 4})],
            ),
            Task(
                "Cancel reservation 1.",
                [gone("reservations", 1)],
                [("cancel_reservation", {"reservation_id": 1})],
            ),
            Task(
                "Change reservation 1 to 19:30.",
                [set_field("reservations", 1, "time", "19:30")],
                [("change_reservation", {"reservation_id": 1, "time": "19:30"})],
            ),
            Task(
                "Book the window table for 'Ida' at 18:00.",
                [new_row("reservations", table_id=1, guest="Ida", time="18:00")],
                [
                    ("list_tables", {"area": "window"}),
                    ("reserve_table", {"table_id": 1, "guest": "Ida", "time": "18:00"}),
                ],
            ),
            Task(
                "How many seats does the patio table have? Answer with the number.",
                [says("4")],
                [("list_tables", {"area": "patio"})],
                "The patio table has 4 seats.",
            ),
        ],
    ),
    App(
        "gym",
        "A gym's classes and the members' bookings.",
        "Gym API",
        [
            Table(
                "classes",
                "GymClass",
                "class_id",
                [("name", "TEXT", R), ("weekday", "TEXT", R), ("spots", "INTEGER", R)],
                [("Spin", "monday", 10), ("Pilates", "tuesday", 8), ("Boxing", "friday", 12)],
            ),
            Table(
                "bookings",
                "Booking",
                "booking_id",
                [("class_id", "INTEGER", R), ("member", "TEXT", R)],
                [(1, "zoe")],
            ),
        ],
        [
            Route("search", "classes", "find_classes", "Find classes by name", ["name"]),
            Route(
                "list",
                "bookings",
                "list_bookings",
                "Bookings, optionally of one member",
                ["member"],
            ),
            Route(
                "create",
                "bookings",
                "book_class",
                "Book a member into a class",
                ["class_id", "member"],
            ),
            Route("delete", "bookings", "cancel_booking", "Cancel a booking"),
            Route("update", "classes", "update_class", "Change a class's spots", ["spots"]),
        ],
        [
            Task(
                "Book member 'max' into class 2.",
                [new_row("bookings", class_id=2, member="max")],
                [("book_class", {"class_id": 2, "member": "max"})],
            ),
            Task(
                "Cancel booking 1.", [gone("bookings", 1)], [("cancel_booking", {"booking_id": 1})]
            ),
            Task(
                "Find the boxing class and book member 'ray' into it.",
                [new_row("bookings", class_id=3, member="ray")],
                [
                    ("find_classes", {"name": "Boxing"}),
                    ("book_class", {"class_id": 3, "member": "ray"}),
                ],
            ),
            Task(
                "Set the spots of class 1 to 15.",
                [set_field("classes", 1, "spots", 15)],
                [("update_class", {"class_id": 1, "spots": 15})],
            ),
            Task(
                "On which weekday is Pilates? Answer with the day.",
                [says("tuesday")],
                [("find_classes", {"name": "Pilates"})],
                "Pilates is on tuesday.",
            ),
        ],
    ),
    App(
        "hotel",
        "A hotel's rooms and guest bookings.",
        "Hotel API",
        [
            Table(
                "rooms",
                "Room",
                "room_id",
                [("number", "TEXT", R), ("beds", "INTEGER", R), ("rate", "REAL", R)],
                [("101", 1, 90.0), ("102", 2, 120.0), ("201", 2, 150.0)],
            ),
            Table(
                "stays",
                "Stay",
                "stay_id",
                [
                    ("room_id", "INTEGER", R),
                    ("guest", "TEXT", R),
                    ("nights", "INTEGER", 1),
                    ("checked_in", "INTEGER", 0),
                ],
                [(2, "Lou", 3, 0)],
            ),
        ],
        [
            Route("list", "rooms", "list_rooms", "Rooms, optionally by number of beds", ["beds"]),
            Route("get", "rooms", "get_room", "One room"),
            Route("create", "stays", "book_room", "Book a stay", ["room_id", "guest", "nights"]),
            Route("update", "stays", "update_stay", "Change a stay", ["nights", "checked_in"]),
            Route("delete", "stays", "cancel_stay", "Cancel a stay"),
        ],
        [
            Task(
                "Book room 1 for 'Tess' for 2 nights.",
                [new_row("stays", room_id=1, guest="Tess", nights=2)],
                [("book_room", {"room_id": 1, "guest": "Tess", "nights": 2})],
            ),
            Task(
                "Check in stay 1 (checked_in = 1).",
                [set_field("stays", 1, "checked_in", 1)],
                [("update_stay", {"stay_id": 1, "checked_in": 1})],
            ),
            Task(
                "Extend stay 1 to 5 nights.",
                [set_field("stays", 1, "nights", 5)],
                [("update_stay", {"stay_id": 1, "nights": 5})],
            ),
            Task("Cancel stay 1.", [gone("stays", 1)], [("cancel_stay", {"stay_id": 1})]),
            Task(
                "What is the nightly rate of room 3? Answer with the number.",
                [says("150")],
                [("get_room", {"room_id": 3})],
                "Room 3 costs 150.0 a night.",
            ),
        ],
    ),
    App(
        "school",
        "A school's courses and student enrollments with grades.",
        "School API",
        [
            Table(
                "courses",
                "Course",
                "course_id",
                [("code", "TEXT", R), ("title", "TEXT", R)],
                [("MATH1", "Algebra"), ("BIO2", "Genetics"), ("ART1", "Drawing")],
            ),
            Table(
                "enrollments",
                "Enrollment",
                "enrollment_id",
                [("course_id", "INTEGER", R), ("student", "TEXT", R), ("grade", "TEXT", "")],
                [(1, "amy", ""), (2, "bo", "B")],
            ),
        ],
        [
            Route("search", "courses", "search_courses", "Find courses by title", ["title"]),
            Route(
                "create",
                "enrollments",
                "enroll_student",
                "Enroll a student in a course",
                ["course_id", "student"],
            ),
            Route("update", "enrollments", "set_grade", "Set an enrollment's grade", ["grade"]),
            Route("delete", "enrollments", "drop_enrollment", "Drop an enrollment"),
        ],
        [
            Task(
                "Enroll student 'cal' in course 3.",
                [new_row("enrollments", course_id=3, student="cal")],
                [("enroll_student", {"course_id": 3, "student": "cal"})],
            ),
            Task(
                "Give enrollment 1 the grade 'A'.",
                [set_field("enrollments", 1, "grade", "A")],
                [("set_grade", {"enrollment_id": 1, "grade": "A"})],
            ),
            Task(
                "Drop enrollment 2.",
                [gone("enrollments", 2)],
                [("drop_enrollment", {"enrollment_id": 2})],
            ),
            Task(
                "Find the Genetics course and enroll 'dee' in it.",
                [new_row("enrollments", course_id=2, student="dee")],
                [
                    ("search_courses", {"title": "Genetics"}),
                    ("enroll_student", {"course_id": 2, "student": "dee"}),
                ],
            ),
            Task(
                "What is the code of the Drawing course? Answer with the code.",
                [says("ART1")],
                [("search_courses", {"title": "Drawing"})],
                "Drawing is ART1.",
            ),
        ],
    ),
    App(
        "recipes",
        "A recipe box: recipes and the shopping list.",
        "Recipes API",
        [
            Table(
                "recipes",
                "Recipe",
                "recipe_id",
                [("name", "TEXT", R), ("minutes", "INTEGER", R), ("favorite", "INTEGER", 0)],
                [("Pancakes", 20, 0), ("Tomato soup", 35, 1), ("Fried rice", 15, 0)],
            ),
            Table(
                "shopping",
                "ShoppingItem",
                "item_id",
                [("item", "TEXT", R), ("amount", "TEXT", "1")],
                [("eggs", "6")],
            ),
        ],
        [
            Route("search", "recipes", "search_recipes", "Find recipes by name", ["name"]),
            Route(
                "update", "recipes", "mark_favorite", "Mark a recipe favorite or not", ["favorite"]
            ),
            Route("list", "shopping", "shopping_list", "The shopping list", []),
            Route(
                "create",
                "shopping",
                "add_shopping_item",
                "Add to the shopping list",
                ["item", "amount"],
            ),
            Route("delete", "shopping", "remove_shopping_item", "Remove from the shopping list"),
        ],
        [
            Task(
                "Add 'milk' to the shopping list, amount '2'.",
                [new_row("shopping", item="milk", amount="2")],
                [("add_shopping_item", {"item": "milk", "amount": "2"})],
            ),
            Task(
                "Mark recipe 1 as a favorite (favorite = 1).",
                [set_field("recipes", 1, "favorite", 1)],
                [("mark_favorite", {"recipe_id": 1, "favorite": 1})],
            ),
            Task(
                "Remove item 1 from the shopping list.",
                [gone("shopping", 1)],
                [("remove_shopping_item", {"item_id": 1})],
            ),
            Task(
                "Find the fried rice recipe and mark it a favorite.",
                [set_field("recipes", 3, "favorite", 1)],
                [
                    ("search_recipes", {"name": "rice"}),
                    ("mark_favorite", {"recipe_id": 3, "favorite": 1}),
                ],
            ),
            Task(
                "How many minutes does the tomato soup take? Answer with the number.",
                [says("35")],
                [("search_recipes", {"name": "soup"})],
                "It takes 35 minutes.",
            ),
        ],
    ),
    App(
        "flights",
        "An airline's flights and the user's bookings.",
        "Flights API",
        [
            Table(
                "flights",
                "Flight",
                "flight_id",
                [
                    ("code", "TEXT", R),
                    ("origin", "TEXT", R),
                    ("destination", "TEXT", R),
                    ("price", "REAL", R),
                ],
                [
                    ("AR101", "Lisbon", "Paris", 120.0),
                    ("AR202", "Paris", "Rome", 95.0),
                    ("AR303", "Lisbon", "Madrid", 60.0),
                ],
            ),
            Table(
                "tickets",
                "Ticket",
                "ticket_id",
                [("flight_id", "INTEGER", R), ("passenger", "TEXT", R), ("seat", "TEXT", "")],
                [(2, "Rui", "12A")],
            ),
        ],
        [
            Route(
                "list",
                "flights",
                "list_flights",
                "Flights, optionally by origin and destination",
                ["origin", "destination"],
            ),
            Route(
                "create",
                "tickets",
                "book_ticket",
                "Book a ticket",
                ["flight_id", "passenger", "seat"],
            ),
            Route("update", "tickets", "change_seat", "Change a ticket's seat", ["seat"]),
            Route("delete", "tickets", "cancel_ticket", "Cancel a ticket"),
        ],
        [
            Task(
                "Book a ticket on flight 1 for 'Ana'.",
                [new_row("tickets", flight_id=1, passenger="Ana")],
                [("book_ticket", {"flight_id": 1, "passenger": "Ana"})],
            ),
            Task(
                "Change the seat of ticket 1 to '3C'.",
                [set_field("tickets", 1, "seat", "3C")],
                [("change_seat", {"ticket_id": 1, "seat": "3C"})],
            ),
            Task("Cancel ticket 1.", [gone("tickets", 1)], [("cancel_ticket", {"ticket_id": 1})]),
            Task(
                "Book 'Joao' on the flight from Lisbon to Madrid.",
                [new_row("tickets", flight_id=3, passenger="Joao")],
                [
                    ("list_flights", {"origin": "Lisbon", "destination": "Madrid"}),
                    ("book_ticket", {"flight_id": 3, "passenger": "Joao"}),
                ],
            ),
            Task(
                "What does the flight from Paris to Rome cost? Answer with the number.",
                [says("95")],
                [("list_flights", {"origin": "Paris", "destination": "Rome"})],
                "It costs 95.0.",
            ),
        ],
    ),
    App(
        "helpdesk",
        "An IT helpdesk's support tickets and agents.",
        "Helpdesk API",
        [
            Table(
                "agents",
                "Agent",
                "agent_id",
                [("name", "TEXT", R), ("team", "TEXT", R)],
                [("Sam", "network"), ("Kai", "hardware")],
            ),
            Table(
                "issues",
                "Issue",
                "issue_id",
                [
                    ("title", "TEXT", R),
                    ("priority", "TEXT", "low"),
                    ("agent_id", "INTEGER", 0),
                    ("status", "TEXT", "open"),
                ],
                [("VPN down", "high", 0, "open"), ("Printer jam", "low", 2, "open")],
            ),
        ],
        [
            Route("list", "agents", "list_agents", "Agents, optionally by team", ["team"]),
            Route("list", "issues", "list_issues", "Issues, optionally by status", ["status"]),
            Route("create", "issues", "open_issue", "Open an issue", ["title", "priority"]),
            Route(
                "update",
                "issues",
                "update_issue",
                "Assign, reprioritise or close an issue",
                ["priority", "agent_id", "status"],
            ),
        ],
        [
            Task(
                "Open an issue 'Laptop won't boot' with priority 'high'.",
                [new_row("issues", title="Laptop won't boot", priority="high")],
                [("open_issue", {"title": "Laptop won't boot", "priority": "high"})],
            ),
            Task(
                "Close issue 2 (status 'closed').",
                [set_field("issues", 2, "status", "closed")],
                [("update_issue", {"issue_id": 2, "status": "closed"})],
            ),
            Task(
                "Assign issue 1 to agent 1.",
                [set_field("issues", 1, "agent_id", 1)],
                [("update_issue", {"issue_id": 1, "agent_id": 1})],
            ),
            Task(
                "Assign issue 1 to the network team's agent.",
                [set_field("issues", 1, "agent_id", 1)],
                [
                    ("list_agents", {"team": "network"}),
                    ("update_issue", {"issue_id": 1, "agent_id": 1}),
                ],
            ),
            Task(
                "Set the priority of issue 2 to 'medium'.",
                [set_field("issues", 2, "priority", "medium")],
                [("update_issue", {"issue_id": 2, "priority": "medium"})],
            ),
        ],
    ),
]


def records() -> dict[str, list[dict[str, Any]]]:
    """Every file's records, in AWM's field names."""
    out: dict[str, list[dict[str, Any]]] = {
        k: []
        for k in (
            "gen_scenario",
            "gen_tasks",
            "gen_db",
            "gen_sample",
            "gen_envs",
            "gen_verifier.pure_code",
            "oracle",
        )
    }
    for app in APPS:
        db_path = f"./outputs/databases/{app.name}.db"
        out["gen_scenario"].append({"name": app.name, "description": app.description})
        out["gen_tasks"].append({"scenario": app.name, "tasks": [t.text for t in app.tasks]})
        out["gen_db"].append(
            {
                "scenario": app.name,
                "db_schema": {
                    "tables": [
                        {
                            "name": t.name,
                            "ddl": ddl(t),
                            "indexes": [
                                f"CREATE INDEX idx_{t.name}_{t.columns[0][0]} ON {t.name}({t.columns[0][0]});"
                            ],
                            "examples": [
                                dict(
                                    zip(
                                        ["id"] + [c[0] for c in t.columns],
                                        (1, *t.rows[0]),
                                        strict=True,
                                    )
                                )
                            ],
                        }
                        for t in app.tables
                    ]
                },
                "db_path": db_path,
            }
        )
        out["gen_sample"].append(
            {
                "scenario": app.name,
                "tables_count": len(app.tables),
                "inserts_count": sum(len(t.rows) for t in app.tables),
                "sample_data": {
                    "tables": [
                        {"table_name": t.name, "insert_statements": inserts(t)} for t in app.tables
                    ]
                },
            }
        )
        out["gen_envs"].append(
            {"scenario": app.name, "db_path": db_path, "full_code": full_code(app)}
        )
        for i, task in enumerate(app.tasks):
            out["gen_verifier.pure_code"].append(
                {
                    "scenario": app.name,
                    "task_idx": i,
                    "task": task.text,
                    "verification": {"code": verifier(task), "raw_response": ""},
                }
            )
            out["oracle"].append(
                {
                    "scenario": app.name,
                    "task_idx": i,
                    "task": task.text,
                    "calls": [{"name": n, "arguments": a} for n, a in task.calls],
                    "final_answer": task.answer,
                }
            )
    return out


def main() -> None:
    for name, rows in records().items():
        with (HERE / f"{name}.jsonl").open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(APPS)} scenarios, {sum(len(a.tasks) for a in APPS)} tasks to {HERE}")


if __name__ == "__main__":
    main()
