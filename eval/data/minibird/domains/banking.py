"""Train database ``banking``: clients, accounts, transactions and loans.

Noise: a noisy transaction type, amounts stored as text, loan status codes explained
only in the description CSV, interest rates as 0-1 fractions.
"""

from __future__ import annotations

import datetime as dt
import random

from eval.data.minibird import words as w
from eval.data.minibird.questions import Ctx, intent, lit
from eval.data.minibird.spec import Domain, Table, col

TRANS_TYPES = {"credit": ("CREDIT", "Credit"), "debit": ("DEBIT", "Debit", "debet")}
ACCOUNT_TYPES = ("Checking", "Savings", "Business")
STATUS = ("A", "B", "C", "D")
STATUS_MEANING = (
    "A = finished, no problems; B = finished, unpaid; C = running, fine so far; D = running, client in debt"
)

TABLES = (
    Table(
        "clients",
        "client",
        "clients",
        (
            col("client_id", "INTEGER", "id", "client id", "unique id of the client", pk=True),
            col("client_name", "TEXT", "name", "client name", "full name of the client"),
            col("gender", "TEXT", "cat", "gender", "gender of the client", value_description="F = female, M = male"),
            col("birth_date", "TEXT", "date", "birth date", "date of birth", date_format="iso"),
            col("district", "TEXT", "cat", "district", "district where the client lives"),
        ),
    ),
    Table(
        "accounts",
        "account",
        "accounts",
        (
            col("account_id", "INTEGER", "id", "account id", "unique id of the account", pk=True),
            col("client_id", "INTEGER", "fk", "client id", "owner of the account", fk=("clients", "client_id")),
            col("acct_type", "TEXT", "cat", "account type", "type of account", abbreviated=True),
            col("open_date", "TEXT", "date", "opening date", "date the account was opened", date_format="iso"),
            col("balance", "REAL", "num", "balance", "current balance in dollars"),
        ),
    ),
    Table(
        "trans",
        "transaction",
        "transactions",
        (
            col("trans_id", "INTEGER", "id", "transaction id", "unique id of the transaction", pk=True),
            col("account_id", "INTEGER", "fk", "account id", "account", fk=("accounts", "account_id")),
            col("trans_date", "TEXT", "date", "transaction date", "date of the transaction", date_format="iso"),
            col("trans_type", "TEXT", "cat", "transaction type", "direction of the transaction", variants=TRANS_TYPES),
            col("amount", "TEXT", "num", "amount", "amount in dollars", textnum=True),
        ),
    ),
    Table(
        "loans",
        "loan",
        "loans",
        (
            col("loan_id", "INTEGER", "id", "loan id", "unique id of the loan", pk=True),
            col(
                "account_id", "INTEGER", "fk", "account id", "account receiving the loan", fk=("accounts", "account_id")
            ),
            col("amount", "INTEGER", "num", "loan amount", "amount lent in dollars"),
            col(
                "duration_mo", "INTEGER", "num", "duration in months", "length of the loan in months", abbreviated=True
            ),
            col("status", "TEXT", "cat", "status", "repayment status", value_description=STATUS_MEANING),
            col("int_rt", "REAL", "num", "interest rate", "annual interest rate", pct="frac", abbreviated=True),
        ),
    ),
)


def make_rows(rng: random.Random) -> dict[str, list[tuple]]:
    districts = w.CITIES[:10]
    clients = []
    for i, name in enumerate(w.unique(rng, 1100, w.person)):
        born = w.date_between(rng, dt.date(1940, 1, 1), dt.date(2004, 12, 31))
        clients.append((i + 1, name, rng.choice(("F", "M")), w.fmt_date(born, "iso"), rng.choice(districts)))
    accounts = []
    for i in range(1500):
        opened = w.date_between(rng, dt.date(2005, 1, 1), dt.date(2023, 6, 30))
        accounts.append(
            (
                i + 1,
                rng.randrange(1, len(clients) + 1),
                w.weighted(rng, ACCOUNT_TYPES, (5, 4, 1)),
                w.fmt_date(opened, "iso"),
                round(rng.uniform(-500, 60000), 2),
            )
        )
    types = sorted(TRANS_TYPES)
    trans = []
    for i in range(4500):
        day = w.date_between(rng, dt.date(2021, 1, 1), dt.date(2023, 12, 31))
        trans.append(
            (
                i + 1,
                rng.randrange(1, len(accounts) + 1),
                w.fmt_date(day, "iso"),
                w.noisy_pick(rng, rng.choice(types), TRANS_TYPES, 0.25),
                f"{rng.randrange(5, 500000) / 100:.2f}",
            )
        )
    loans = [
        (
            i + 1,
            rng.randrange(1, len(accounts) + 1),
            rng.randrange(10, 500) * 100,
            rng.choice((12, 24, 36, 48, 60)),
            w.weighted(rng, STATUS, (4, 1, 6, 1)),
            round(rng.uniform(0.02, 0.14), 4),
        )
        for i in range(700)
    ]
    return {"clients": clients, "accounts": accounts, "trans": trans, "loans": loans}


@intent("moderate")
def loans_in_debt(ctx: Ctx):
    status, meaning = ctx.choice(
        [
            ("D", "running loans whose client is in debt"),
            ("B", "finished loans that were never repaid"),
            ("A", "loans finished without problems"),
            ("C", "running loans in good standing"),
        ]
    )
    ctx.hint(f"{meaning} refers to status = '{status}'", 0.6)
    k = ctx.choice([24, 36])
    q = ctx.say(
        ["How many {m} have a duration longer than {k} months?", "Among {m}, how many last more than {k} months?"],
        m=meaning,
        k=k,
    )
    return q, ctx.take_evidence(), f"SELECT COUNT(*) FROM loans WHERE status = '{status}' AND duration_mo > {k}"


@intent("challenging")
def female_debit_total(ctx: Ctx):
    gender, word = ctx.choice([("F", "female"), ("M", "male")])
    year = ctx.choice(["2021", "2022", "2023"])
    ctx.hint(f"{word} refers to gender = '{gender}'; amount is stored as text", 0.8)
    ctx.hint("debit is recorded as 'debit', 'DEBIT', 'Debit' or 'debet'", 0.5)
    q = ctx.say(
        [
            "What was the total debit amount of {g} clients in {y}?",
            "Sum the debit transactions of {g} clients during {y}.",
        ],
        g=word,
        y=year,
    )
    sql = (
        "SELECT SUM(CAST(T1.amount AS REAL)) FROM trans AS T1 "
        "INNER JOIN accounts AS T2 ON T1.account_id = T2.account_id "
        f"INNER JOIN clients AS T3 ON T2.client_id = T3.client_id WHERE LOWER(T1.trans_type) IN ('debit', 'debet') "
        f"AND T3.gender = {lit(gender)} AND STRFTIME('%Y', T1.trans_date) = {lit(year)}"
    )
    return q, ctx.take_evidence(), sql


@intent("challenging")
def avg_age_of_type(ctx: Ctx):
    kind = ctx.choice(list(ACCOUNT_TYPES))
    ctx.hint("age = 2024 - the year of birth_date", 0.8)
    q = ctx.say(
        [
            "What is the average age in 2024 of clients who hold a {t} account?",
            "How old, on average, are the owners of {t} accounts as of 2024?",
        ],
        t=ctx.mention(kind),
    )
    sql = (
        "SELECT AVG(2024 - CAST(STRFTIME('%Y', T1.birth_date) AS INTEGER)) FROM clients AS T1 WHERE T1.client_id IN "
        f"(SELECT client_id FROM accounts WHERE acct_type = {lit(kind)})"
    )
    return q, ctx.take_evidence(), sql


DOMAIN = Domain(
    "banking", "train", "retail banking", TABLES, make_rows, (loans_in_debt, female_debit_total, avg_age_of_type)
)
