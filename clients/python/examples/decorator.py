"""@idempotent: a function that runs at most once per key, whoever retries
it. Run with IDEMD_URL and IDEMD_API_KEY set."""

import os

import idemd

client = idemd.Client(os.environ["IDEMD_URL"], os.environ["IDEMD_API_KEY"])
OPERATION = os.environ.get("EXAMPLE_OPERATION", "order.create")


@idemd.idempotent(client, operation=OPERATION, key=lambda user, cart: "checkout:" + cart,
                  subject=lambda user, cart: user)
def checkout(user: str, cart: str) -> dict:
    print("  charging", user, "for", cart)
    return {"order": "o-" + cart, "user": user}


print(checkout("dave", "c-1"))
print(checkout("dave", "c-1"))  # replayed: no second charge
