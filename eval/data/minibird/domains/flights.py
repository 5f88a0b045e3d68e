"""Train database ``flights``: airports, airlines, flights and bookings.

Noise: airport codes as TEXT keys, NULL delays, cancellations as 0/1, an abbreviated
distance column, load factors as 0-1 fractions.
"""

from __future__ import annotations

import datetime as dt
import random

from eval.data.minibird import words as w
from eval.data.minibird.questions import Ctx, intent, lit
from eval.data.minibird.spec import Domain, Table, col

CABINS = ("Economy", "Premium Economy", "Business", "First")

TABLES = (
    Table(
        "airports",
        "airport",
        "airports",
        (
            col("apt_cd", "TEXT", "id", "airport code", "three-letter airport code", pk=True, abbreviated=True),
            col("apt_nm", "TEXT", "name", "airport name", "name of the airport", abbreviated=True),
            col("city", "TEXT", "cat", "city", "city served"),
            col("country", "TEXT", "cat", "country", "country of the airport"),
        ),
    ),
    Table(
        "airlines",
        "airline",
        "airlines",
        (
            col("airline_id", "INTEGER", "id", "airline id", "unique id of the airline", pk=True),
            col("airline_name", "TEXT", "name", "airline name", "name of the airline"),
            col("country", "TEXT", "cat", "home country", "country where the airline is based"),
            col("founded", "INTEGER", "num", "founding year", "year the airline was founded"),
        ),
    ),
    Table(
        "flights",
        "flight",
        "flights",
        (
            col("flight_id", "INTEGER", "id", "flight id", "unique id of the flight", pk=True),
            col("airline_id", "INTEGER", "fk", "airline id", "operating airline", fk=("airlines", "airline_id")),
            col(
                "orig_cd",
                "TEXT",
                "fk",
                "origin airport code",
                "departure airport",
                fk=("airports", "apt_cd"),
                abbreviated=True,
            ),
            col(
                "dest_cd",
                "TEXT",
                "fk",
                "destination airport code",
                "arrival airport",
                fk=("airports", "apt_cd"),
                abbreviated=True,
            ),
            col("dep_date", "TEXT", "date", "departure date", "scheduled departure date", date_format="iso"),
            col(
                "dep_delay",
                "INTEGER",
                "num",
                "departure delay",
                "departure delay in minutes; NULL when not reported",
                nullable=True,
            ),
            col("cancelled", "INTEGER", "flag", "cancelled flag", "1 if the flight was cancelled, else 0"),
            col("dist_km", "INTEGER", "num", "distance", "great-circle distance in kilometres", abbreviated=True),
            col("load_factor", "REAL", "num", "load factor", "share of seats sold", pct="frac"),
        ),
    ),
    Table(
        "bookings",
        "booking",
        "bookings",
        (
            col("booking_id", "INTEGER", "id", "booking id", "unique id of the booking", pk=True),
            col("flight_id", "INTEGER", "fk", "flight id", "flight booked", fk=("flights", "flight_id")),
            col("cabin", "TEXT", "cat", "cabin class", "cabin class booked"),
            col("fare", "REAL", "num", "fare", "fare paid in dollars"),
            col("booked_on", "TEXT", "date", "booking date", "date of the booking", date_format="iso"),
        ),
    ),
)


def make_rows(rng: random.Random) -> dict[str, list[tuple]]:
    letters = "ABCDEFGHIJKLMNOPRSTUVWXYZ"
    codes = w.unique(rng, 40, lambda r: "".join(r.choice(letters) for _ in range(3)))
    codes = [c if len(c) == 3 else c[:2] + letters[i % len(letters)] for i, c in enumerate(codes)]
    airports = [
        (
            code,
            f"{w.CITIES[i % len(w.CITIES)]} {('International', 'Regional', 'Airfield')[i % 3]}",
            w.CITIES[i % len(w.CITIES)],
            rng.choice(w.COUNTRIES),
        )
        for i, code in enumerate(dict.fromkeys(codes))
    ]
    airlines = [
        (i + 1, name, rng.choice(w.COUNTRIES), rng.randrange(1925, 2015))
        for i, name in enumerate(
            w.unique(rng, 18, lambda r: f"{r.choice(w.ADJECTIVES)} {r.choice(('Air', 'Airways', 'Wings', 'Jet'))}")
        )
    ]
    flights = []
    for i in range(3500):
        orig, dest = rng.sample([a[0] for a in airports], 2)
        day = w.date_between(rng, dt.date(2021, 1, 1), dt.date(2023, 12, 31))
        cancelled = 1 if rng.random() < 0.04 else 0
        delay = None if cancelled else w.maybe_null(rng, max(0, int(rng.gauss(12, 25))), 0.08)
        flights.append(
            (
                i + 1,
                rng.randrange(1, len(airlines) + 1),
                orig,
                dest,
                w.fmt_date(day, "iso"),
                delay,
                cancelled,
                rng.randrange(200, 9000),
                round(rng.uniform(0.35, 1.0), 3),
            )
        )
    bookings = []
    for i in range(3000):
        cabin = w.weighted(rng, CABINS, (12, 3, 2, 1))
        day = w.date_between(rng, dt.date(2020, 10, 1), dt.date(2023, 12, 31))
        bookings.append(
            (
                i + 1,
                rng.randrange(1, len(flights) + 1),
                cabin,
                round(rng.uniform(60, 900) * (1 + CABINS.index(cabin)), 2),
                w.fmt_date(day, "iso"),
            )
        )
    return {"airports": airports, "airlines": airlines, "flights": flights, "bookings": bookings}


@intent("simple")
def cancelled_count(ctx: Ctx):
    year = ctx.choice(["2021", "2022", "2023"])
    ctx.hint("cancelled = 1 means the flight was cancelled", 0.7)
    q = ctx.say(["How many flights were cancelled in {y}?", "Count the cancelled flights of {y}."], y=year)
    return (
        q,
        ctx.take_evidence(),
        f"SELECT COUNT(*) FROM flights WHERE cancelled = 1 AND STRFTIME('%Y', dep_date) = '{year}'",
    )


@intent("challenging")
def airline_cancel_rate(ctx: Ctx):
    airline = ctx.choice([r[0] for r in ctx.rows("SELECT airline_name FROM airlines ORDER BY 1")])
    ctx.hint("cancellation rate = SUM(cancelled) * 100 / COUNT(flight_id)", 0.8)
    q = ctx.say(
        ["What is the cancellation rate, in percent, of {a}?", "What percentage of {a} flights were cancelled?"],
        a=ctx.mention(airline),
    )
    sql = (
        "SELECT CAST(SUM(T1.cancelled) AS REAL) * 100 / COUNT(T1.flight_id) FROM flights AS T1 "
        "INNER JOIN airlines AS T2 "
        f"ON T1.airline_id = T2.airline_id WHERE T2.airline_name = {lit(airline)}"
    )
    return q, ctx.take_evidence(), sql


@intent("moderate")
def route_count(ctx: Ctx):
    row = ctx.choice(
        ctx.rows("SELECT orig_cd, dest_cd FROM flights GROUP BY orig_cd, dest_cd HAVING COUNT(*) >= 2 ORDER BY 1, 2")
    )
    if row is None:
        return None
    orig, dest = row
    city = dict(ctx.rows("SELECT apt_cd, city FROM airports"))
    q = ctx.say(
        ["How many flights flew from {o} to {d}?", "Count the flights departing {o} for {d}."],
        o=city[orig],
        d=city[dest],
    )
    sql = (
        "SELECT COUNT(*) FROM flights AS T1 INNER JOIN airports AS T2 ON T1.orig_cd = T2.apt_cd "
        "INNER JOIN airports AS T3 "
        f"ON T1.dest_cd = T3.apt_cd WHERE T2.city = {lit(city[orig])} AND T3.city = {lit(city[dest])}"
    )
    return q, ctx.take_evidence(), sql


DOMAIN = Domain(
    "flights", "train", "airline flights", TABLES, make_rows, (cancelled_count, airline_cancel_rate, route_count)
)
