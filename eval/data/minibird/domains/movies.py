"""Dev database ``movies``: studios, movies, people, credits, ratings and box office.

Noise: release dates as "Month DD, YYYY" text, a noisy genre column, budgets stored as
text (NULL when unknown), critic scores 0-100 beside box-office shares as 0-1 fractions,
ratings.movie_ref TEXT referencing the INTEGER movies.movie_id, abbreviated names.
"""

from __future__ import annotations

import datetime as dt
import random

from eval.data.minibird import words as w
from eval.data.minibird.questions import Ctx, intent, lit
from eval.data.minibird.spec import Domain, Table, col

GENRES = {
    "Science Fiction": ("Sci-Fi", "sci-fi", "science fiction"),
    "Comedy": ("comedy", "COMEDY"),
    "Drama": ("drama",),
    "Horror": ("horror",),
    "Animation": ("Animated", "animation"),
    "Action": ("action",),
    "Documentary": ("Documentry", "documentary"),
}
MARKETS = ("Domestic", "Europe", "Asia", "Latin America", "Other")
REGIONS = ("North America", "Europe", "Asia", "Oceania", "Africa", "South America")

TABLES = (
    Table(
        "studios",
        "studio",
        "studios",
        (
            col("studio_id", "INTEGER", "id", "studio id", "unique id of the studio", pk=True),
            col("studio_name", "TEXT", "name", "studio name", "name of the studio"),
            col("country", "TEXT", "cat", "country", "country of the studio's headquarters"),
            col("founded_yr", "INTEGER", "num", "founding year", "year the studio was founded", abbreviated=True),
        ),
    ),
    Table(
        "movies",
        "movie",
        "movies",
        (
            col("movie_id", "INTEGER", "id", "movie id", "unique id of the movie", pk=True),
            col("title", "TEXT", "name", "title", "title of the movie"),
            col(
                "studio_id", "INTEGER", "fk", "studio id", "studio that produced the movie", fk=("studios", "studio_id")
            ),
            col("release_date", "TEXT", "date", "release date", "theatrical release date", date_format="long"),
            col(
                "genre",
                "TEXT",
                "cat",
                "genre",
                "main genre of the movie",
                variants=GENRES,
                value_description="entered by hand; spellings vary",
            ),
            col("runtime_min", "INTEGER", "num", "runtime in minutes", "running time in minutes", nullable=True),
            col("budget_usd", "TEXT", "num", "budget", "production budget in US dollars", textnum=True, nullable=True),
            col("rt_score", "INTEGER", "num", "critic score", "aggregated critic score", pct="100", abbreviated=True),
        ),
    ),
    Table(
        "people",
        "person",
        "people",
        (
            col("person_id", "INTEGER", "id", "person id", "unique id of the person", pk=True),
            col("full_name", "TEXT", "name", "name", "full name of the person"),
            col("birth_yr", "INTEGER", "num", "birth year", "year of birth", nullable=True, abbreviated=True),
            col("country", "TEXT", "cat", "country of origin", "country the person comes from"),
        ),
    ),
    Table(
        "credits",
        "credit",
        "credits",
        (
            col("credit_id", "INTEGER", "id", "credit id", "unique id of the credit", pk=True),
            col("movie_id", "INTEGER", "fk", "movie id", "movie credited", fk=("movies", "movie_id")),
            col("person_id", "INTEGER", "fk", "person id", "person credited", fk=("people", "person_id")),
            col("role", "TEXT", "cat", "role", "role of the person in the movie"),
            col("billing", "INTEGER", "num", "billing position", "position in the credits, 1 = top billing"),
        ),
    ),
    Table(
        "ratings",
        "rating",
        "ratings",
        (
            col("rating_id", "INTEGER", "id", "rating id", "unique id of the rating", pk=True),
            col(
                "movie_ref",
                "TEXT",
                "fk",
                "movie id",
                "movie rated (the movie id stored as text)",
                fk=("movies", "movie_id"),
                abbreviated=True,
            ),
            col("region", "TEXT", "cat", "viewer region", "region of the viewer"),
            col("stars", "REAL", "num", "stars", "rating from 0.5 to 5 stars"),
            col("rated_at", "TEXT", "date", "rating date", "date and time of the rating", date_format="iso_dt"),
        ),
    ),
    Table(
        "box_office",
        "box office record",
        "box office records",
        (
            col("bo_id", "INTEGER", "id", "box office id", "unique id of the record", pk=True, abbreviated=True),
            col("movie_id", "INTEGER", "fk", "movie id", "movie", fk=("movies", "movie_id")),
            col("market", "TEXT", "cat", "market", "market where the gross was earned"),
            col("gross_usd", "INTEGER", "num", "gross", "gross earnings in US dollars in this market"),
            col(
                "wgs",
                "REAL",
                "num",
                "worldwide gross share",
                "share of the movie's worldwide gross earned in this market",
                pct="frac",
                abbreviated=True,
            ),
        ),
    ),
)


def make_rows(rng: random.Random) -> dict[str, list[tuple]]:
    studio_words = ("Pictures", "Studios", "Films", "Entertainment", "Productions")
    studios = [
        (i + 1, name, rng.choice(w.COUNTRIES), rng.randrange(1912, 2015))
        for i, name in enumerate(w.unique(rng, 28, lambda r: f"{r.choice(w.NOUNS)} {r.choice(studio_words)}"))
    ]
    genre_names = sorted(GENRES)
    movies = []
    for i, title in enumerate(w.unique(rng, 850, w.title)):
        released = w.date_between(rng, dt.date(1975, 1, 1), dt.date(2023, 12, 31))
        budget = w.maybe_null(rng, str(rng.randrange(5, 2000) * 100_000), 0.15)
        movies.append(
            (
                i + 1,
                title,
                rng.randrange(1, len(studios) + 1),
                w.fmt_date(released, "long"),
                w.noisy_pick(rng, rng.choice(genre_names), GENRES, 0.25),
                w.maybe_null(rng, rng.randrange(78, 185), 0.08),
                budget,
                rng.randrange(5, 100),
            )
        )
    people = [
        (i + 1, name, w.maybe_null(rng, rng.randrange(1930, 2005), 0.1), rng.choice(w.COUNTRIES))
        for i, name in enumerate(w.unique(rng, 900, w.person))
    ]
    credits = []
    for i in range(3000):
        role = w.weighted(rng, ("Actor", "Director", "Writer", "Producer"), (8, 1, 1, 1))
        credits.append(
            (i + 1, rng.randrange(1, len(movies) + 1), rng.randrange(1, len(people) + 1), role, rng.randrange(1, 20))
        )
    ratings = []
    for i in range(4000):
        day = w.date_between(rng, dt.date(2015, 1, 1), dt.date(2023, 12, 31))
        ratings.append(
            (
                i + 1,
                str(rng.randrange(1, len(movies) + 1)),
                rng.choice(REGIONS),
                rng.randrange(1, 11) / 2,
                w.fmt_date(day, "iso_dt", rng),
            )
        )
    box: list[tuple[int, int, str, int, float]] = []
    for movie_id in range(1, len(movies) + 1, 2):
        markets = sorted(rng.sample(MARKETS, rng.randrange(1, 4)), key=MARKETS.index)
        grosses = [rng.randrange(1, 400) * 250_000 for _ in markets]
        total = sum(grosses)
        for market, gross in zip(markets, grosses, strict=True):
            box.append((len(box) + 1, movie_id, market, gross, round(gross / total, 4)))
    return {
        "studios": studios,
        "movies": movies,
        "people": people,
        "credits": credits,
        "ratings": ratings,
        "box_office": box,
    }


@intent("moderate")
def movies_released_in(ctx: Ctx):
    year = ctx.choice([r[0] for r in ctx.rows("SELECT DISTINCT SUBSTR(release_date, -4) FROM movies ORDER BY 1")])
    genre = ctx.choice(sorted(GENRES))
    cond, m = ctx.cat_cond(ctx.domain.table("movies"), ctx.domain.table("movies").column("genre"), genre)
    ctx.hint("release_date is stored as text like 'March 05, 2011'", 0.9)
    q = ctx.say(
        ["Which {g} movies were released in {y}?", "List the titles of {g} films released in {y}."], g=m, y=year
    )
    return q, ctx.take_evidence(), f"SELECT title FROM movies WHERE SUBSTR(release_date, -4) = {lit(year)} AND {cond}"


@intent("challenging")
def avg_stars_of_genre(ctx: Ctx):
    movies = ctx.domain.table("movies")
    cond, m = ctx.cat_cond(movies, movies.column("genre"), ctx.choice(sorted(GENRES)), alias="T2")
    on = ctx.join("T1", ctx.domain.table("ratings").column("movie_ref"), "T2", movies.column("movie_id"))
    q = ctx.say(
        [
            "What is the average star rating given to {g} movies?",
            "On average, how many stars do viewers give {g} films?",
        ],
        g=m,
    )
    return (
        q,
        ctx.take_evidence(),
        f"SELECT AVG(T1.stars) FROM ratings AS T1 INNER JOIN movies AS T2 ON {on} WHERE {cond}",
    )


@intent("challenging")
def domestic_share_pct(ctx: Ctx):
    k = ctx.choice([40, 50, 60, 70])
    market = ctx.choice(list(MARKETS[:3]))
    ctx.hint("wgs is stored as a fraction; percentage = wgs * 100", 0.8)
    q = ctx.say(
        [
            "List the titles of movies that earned more than {k}% of their worldwide gross in the {mk} market.",
            "Which movies made over {k} percent of their worldwide gross from {mk}?",
        ],
        k=k,
        mk=ctx.mention(market),
    )
    sql = (
        f"SELECT DISTINCT T2.title FROM box_office AS T1 INNER JOIN movies AS T2 ON T1.movie_id = T2.movie_id "
        f"WHERE T1.market = {lit(market)} AND T1.wgs * 100 > {k} AND T1.gross_usd > 90000000"
    )
    return q + " Only count markets where it grossed over 90 million dollars.", ctx.take_evidence(), sql


@intent("challenging")
def budget_vs_score(ctx: Ctx):
    k = ctx.choice([60, 70, 80, 90])
    ctx.hint("budget_usd is stored as text; rt_score is between 0 and 100", 0.8)
    q = ctx.say(
        [
            "What is the average budget of movies with a critic score of at least {k}?",
            "For films scoring {k} or more with critics, what is their mean budget?",
        ],
        k=k,
    )
    return q, ctx.take_evidence(), f"SELECT AVG(CAST(budget_usd AS REAL)) FROM movies WHERE rt_score >= {k}"


@intent("simple")
def director_count(ctx: Ctx):
    role = ctx.choice(["Director", "Writer", "Producer", "Actor"])
    m = ctx.mention(role)
    q = ctx.say(["How many credits are for the role {r}?", "Count the credits whose role is {r}."], r=m)
    return q, ctx.take_evidence(), f"SELECT COUNT(*) FROM credits WHERE role = {lit(role)}"


DOMAIN = Domain(
    "movies",
    "dev",
    "films and ratings",
    TABLES,
    make_rows,
    (movies_released_in, avg_stars_of_genre, domestic_share_pct, budget_vs_score, director_count),
)
