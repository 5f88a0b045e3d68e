"""Train database ``retail``: customers, products, orders and order items.

Noise: join dates as MM/DD/YYYY text, a noisy customer segment, stock quantities stored
as text, discounts as 0-1 fractions.
"""

from __future__ import annotations

import datetime as dt
import random

from eval.data.minibird import words as w
from eval.data.minibird.questions import Ctx, intent, lit
from eval.data.minibird.spec import Domain, Table, col

SEGMENTS = {
    "Consumer": ("consumer", "CONSUMER"),
    "Corporate": ("corporate", "Corp."),
    "Home Office": ("home office", "HomeOffice"),
}
CATEGORIES = ("Furniture", "Office Supplies", "Technology", "Kitchen", "Outdoor")
STATUSES = ("Delivered", "Shipped", "Processing", "Cancelled", "Returned")
SHIP = ("Standard", "Express", "Same Day", "Pickup")

TABLES = (
    Table(
        "customers",
        "customer",
        "customers",
        (
            col("cust_id", "INTEGER", "id", "customer id", "unique id of the customer", pk=True),
            col("cust_name", "TEXT", "name", "customer name", "full name of the customer", abbreviated=True),
            col("city", "TEXT", "cat", "city", "city of the customer"),
            col("segment", "TEXT", "cat", "segment", "market segment", variants=SEGMENTS),
            col(
                "join_dt",
                "TEXT",
                "date",
                "sign-up date",
                "date the customer signed up",
                date_format="mdy",
                abbreviated=True,
            ),
        ),
    ),
    Table(
        "products",
        "product",
        "products",
        (
            col("prod_id", "INTEGER", "id", "product id", "unique id of the product", pk=True),
            col("prod_name", "TEXT", "name", "product name", "name of the product", abbreviated=True),
            col("category", "TEXT", "cat", "category", "product category"),
            col("unit_price", "REAL", "num", "unit price", "list price of one unit in dollars"),
            col("stock_qty", "TEXT", "num", "stock quantity", "units in stock", textnum=True, abbreviated=True),
        ),
    ),
    Table(
        "orders",
        "order",
        "orders",
        (
            col("order_id", "INTEGER", "id", "order id", "unique id of the order", pk=True),
            col(
                "cust_id", "INTEGER", "fk", "customer id", "customer who placed the order", fk=("customers", "cust_id")
            ),
            col("order_date", "TEXT", "date", "order date", "date the order was placed", date_format="iso"),
            col("status", "TEXT", "cat", "status", "fulfilment status"),
            col("ship_mode", "TEXT", "cat", "shipping mode", "shipping mode"),
        ),
    ),
    Table(
        "order_items",
        "order item",
        "order items",
        (
            col("item_id", "INTEGER", "id", "item id", "unique id of the order line", pk=True),
            col("order_id", "INTEGER", "fk", "order id", "order", fk=("orders", "order_id")),
            col("prod_id", "INTEGER", "fk", "product id", "product ordered", fk=("products", "prod_id")),
            col("qty", "INTEGER", "num", "quantity", "units ordered", abbreviated=True),
            col("disc", "REAL", "num", "discount", "discount applied to the line", pct="frac", abbreviated=True),
        ),
    ),
)


def make_rows(rng: random.Random) -> dict[str, list[tuple]]:
    segments = sorted(SEGMENTS)
    customers = []
    for i, name in enumerate(w.unique(rng, 900, w.person)):
        joined = w.date_between(rng, dt.date(2015, 1, 1), dt.date(2023, 6, 30))
        customers.append(
            (
                i + 1,
                name,
                rng.choice(w.CITIES),
                w.noisy_pick(rng, rng.choice(segments), SEGMENTS, 0.2),
                w.fmt_date(joined, "mdy"),
            )
        )
    items_words = (
        "Chair",
        "Desk",
        "Lamp",
        "Monitor",
        "Stapler",
        "Kettle",
        "Tent",
        "Router",
        "Shelf",
        "Blender",
        "Grill",
        "Backpack",
        "Keyboard",
        "Cabinet",
        "Toaster",
        "Lantern",
    )
    products = [
        (i + 1, name, rng.choice(CATEGORIES), round(rng.uniform(2, 900), 2), str(rng.randrange(0, 500)))
        for i, name in enumerate(w.unique(rng, 260, lambda r: f"{r.choice(w.ADJECTIVES)} {r.choice(items_words)}"))
    ]
    orders = []
    for i in range(2400):
        day = w.date_between(rng, dt.date(2019, 1, 1), dt.date(2023, 12, 31))
        orders.append(
            (
                i + 1,
                rng.randrange(1, len(customers) + 1),
                w.fmt_date(day, "iso"),
                w.weighted(rng, STATUSES, (10, 3, 2, 1, 1)),
                rng.choice(SHIP),
            )
        )
    items = [
        (
            i + 1,
            rng.randrange(1, len(orders) + 1),
            rng.randrange(1, len(products) + 1),
            rng.randrange(1, 10),
            rng.choice((0.0, 0.0, 0.05, 0.1, 0.15, 0.2, 0.3)),
        )
        for i in range(4200)
    ]
    return {"customers": customers, "products": products, "orders": orders, "order_items": items}


@intent("challenging")
def revenue_of_category(ctx: Ctx):
    cat = ctx.choice(list(CATEGORIES))
    year = ctx.choice(["2019", "2020", "2021", "2022", "2023"])
    ctx.hint("revenue = qty * unit_price * (1 - disc)", 0.9)
    q = ctx.say(
        ["What was the total revenue from {c} products in {y}?", "How much revenue did {c} items bring in during {y}?"],
        c=ctx.mention(cat),
        y=year,
    )
    sql = (
        "SELECT SUM(T1.qty * T2.unit_price * (1 - T1.disc)) FROM order_items AS T1 INNER JOIN products AS T2 ON "
        "T1.prod_id = T2.prod_id INNER JOIN orders AS T3 ON T1.order_id = T3.order_id "
        f"WHERE T2.category = {lit(cat)} AND STRFTIME('%Y', T3.order_date) = {lit(year)}"
    )
    return q, ctx.take_evidence(), sql


@intent("moderate")
def low_stock(ctx: Ctx):
    k = ctx.choice([5, 10, 20, 50])
    ctx.hint("stock_qty is stored as text", 0.5)
    q = ctx.say(
        [
            "List the names of products with fewer than {k} units in stock.",
            "Which products have a stock below {k} units?",
        ],
        k=k,
    )
    return q, ctx.take_evidence(), f"SELECT prod_name FROM products WHERE CAST(stock_qty AS INTEGER) < {k}"


DOMAIN = Domain("retail", "train", "retail orders", TABLES, make_rows, (revenue_of_category, low_stock))
