"""Train database ``library``: branches, books, members and loans.

Noise: membership dates as DD/MM/YYYY text, a noisy genre, NULL return dates and page
counts, late fees stored as text.
"""

from __future__ import annotations

import datetime as dt
import random

from eval.data.minibird import words as w
from eval.data.minibird.questions import Ctx, intent, lit
from eval.data.minibird.spec import Domain, Table, col

GENRES = {
    "Fantasy": ("fantasy",),
    "Mystery": ("mystery", "Mistery"),
    "Romance": ("romance",),
    "History": ("history", "Historical"),
    "Science": ("science", "SCIENCE"),
    "Biography": ("biography", "Bio"),
}
TIERS = ("Standard", "Student", "Senior", "Premium")

TABLES = (
    Table(
        "branches",
        "branch",
        "branches",
        (
            col("branch_id", "INTEGER", "id", "branch id", "unique id of the branch", pk=True),
            col("branch_name", "TEXT", "name", "branch name", "name of the library branch"),
            col("city", "TEXT", "cat", "city", "city of the branch"),
        ),
    ),
    Table(
        "books",
        "book",
        "books",
        (
            col("book_id", "INTEGER", "id", "book id", "unique id of the book", pk=True),
            col("title", "TEXT", "name", "title", "title of the book"),
            col("author", "TEXT", "cat", "author", "author of the book"),
            col("genre", "TEXT", "cat", "genre", "genre shelf", variants=GENRES),
            col("pub_year", "INTEGER", "num", "publication year", "year of publication", abbreviated=True),
            col("pages", "INTEGER", "num", "page count", "number of pages", nullable=True),
        ),
    ),
    Table(
        "members",
        "member",
        "members",
        (
            col("member_id", "INTEGER", "id", "member id", "unique id of the member", pk=True),
            col("member_name", "TEXT", "name", "member name", "full name of the member"),
            col(
                "branch_id",
                "INTEGER",
                "fk",
                "home branch id",
                "branch where the member registered",
                fk=("branches", "branch_id"),
            ),
            col("member_since", "TEXT", "date", "registration date", "date the member registered", date_format="dmy"),
            col("tier", "TEXT", "cat", "membership tier", "membership tier"),
        ),
    ),
    Table(
        "loans",
        "loan",
        "loans",
        (
            col("loan_id", "INTEGER", "id", "loan id", "unique id of the loan", pk=True),
            col("book_id", "INTEGER", "fk", "book id", "book lent", fk=("books", "book_id")),
            col("member_id", "INTEGER", "fk", "member id", "member who borrowed", fk=("members", "member_id")),
            col("loan_date", "TEXT", "date", "loan date", "date the book was lent", date_format="iso"),
            col(
                "return_date",
                "TEXT",
                "date",
                "return date",
                "date the book came back; NULL while on loan",
                date_format="iso",
                nullable=True,
            ),
            col("late_fee", "TEXT", "num", "late fee", "late fee charged in dollars", textnum=True),
        ),
    ),
)


def make_rows(rng: random.Random) -> dict[str, list[tuple]]:
    branches = [
        (i + 1, f"{city} {('Central', 'Public', 'Community')[i % 3]} Library", city)
        for i, city in enumerate(w.CITIES[:14])
    ]
    authors = w.unique(rng, 70, w.person)
    genres = sorted(GENRES)
    books = [
        (
            i + 1,
            title,
            rng.choice(authors),
            w.noisy_pick(rng, rng.choice(genres), GENRES, 0.2),
            rng.randrange(1890, 2024),
            w.maybe_null(rng, rng.randrange(90, 900), 0.1),
        )
        for i, title in enumerate(w.unique(rng, 1200, w.title))
    ]
    members = []
    for i, name in enumerate(w.unique(rng, 1500, w.person)):
        since = w.date_between(rng, dt.date(2008, 1, 1), dt.date(2023, 6, 30))
        members.append(
            (
                i + 1,
                name,
                rng.randrange(1, len(branches) + 1),
                w.fmt_date(since, "dmy"),
                w.weighted(rng, TIERS, (6, 3, 2, 1)),
            )
        )
    loans = []
    for i in range(4000):
        lent = w.date_between(rng, dt.date(2020, 1, 1), dt.date(2023, 12, 20))
        back = None if rng.random() < 0.07 else lent + dt.timedelta(days=rng.randrange(1, 45))
        fee = 0.0 if back is None or (back - lent).days <= 21 else round(((back - lent).days - 21) * 0.25, 2)
        loans.append(
            (
                i + 1,
                rng.randrange(1, len(books) + 1),
                rng.randrange(1, len(members) + 1),
                w.fmt_date(lent, "iso"),
                w.fmt_date(back, "iso") if back else None,
                f"{fee:.2f}",
            )
        )
    return {"branches": branches, "books": books, "members": members, "loans": loans}


@intent("moderate")
def overdue_loans(ctx: Ctx):
    days = ctx.choice([21, 30, 40])
    ctx.hint("loan length = JULIANDAY(return_date) - JULIANDAY(loan_date)", 0.8)
    q = ctx.say(
        [
            "How many loans were returned more than {d} days after they were lent?",
            "Count the loans kept longer than {d} days before being returned.",
        ],
        d=days,
    )
    return (
        q,
        ctx.take_evidence(),
        f"SELECT COUNT(*) FROM loans WHERE JULIANDAY(return_date) - JULIANDAY(loan_date) > {days}",
    )


@intent("challenging")
def genre_loans_by_tier(ctx: Ctx):
    books = ctx.domain.table("books")
    cond, m = ctx.cat_cond(books, books.column("genre"), ctx.choice(sorted(GENRES)), alias="T2")
    tier = ctx.choice(list(TIERS))
    q = ctx.say(
        [
            "How many {g} books were borrowed by {t} members?",
            "Count the loans of {g} books made by members of the {t} tier.",
        ],
        g=m,
        t=ctx.mention(tier),
    )
    sql = (
        "SELECT COUNT(*) FROM loans AS T1 INNER JOIN books AS T2 ON T1.book_id = T2.book_id INNER JOIN members AS T3 "
        f"ON T1.member_id = T3.member_id WHERE {cond} AND T3.tier = {lit(tier)}"
    )
    return q, ctx.take_evidence(), sql


@intent("simple")
def on_loan(ctx: Ctx):
    q = ctx.say(["How many books are still on loan?", "How many loans have not been returned yet?"])
    ctx.hint("still on loan refers to return_date IS NULL", 0.7)
    return q, ctx.take_evidence(), "SELECT COUNT(*) FROM loans WHERE return_date IS NULL"


DOMAIN = Domain("library", "train", "library loans", TABLES, make_rows, (overdue_loans, genre_loans_by_tier, on_loan))
