"""Example plugin: `email.SendEmailPy` on queue `examples.emails-py` (4 attempts, exponential
waits from 1s to 8s), the semantics of the Rust `email-sender` plus a deferral and a
follow-up. The SMTP server is pretend, and its behaviour follows the address:

- an address without `@` is fatal (`invalid address ...`): no retry can fix it;
- an address containing `flaky` meets a busy server (retryable) on attempts 1 and 2, and is
  sent on attempt 3;
- an address containing `greylisted` is deferred for 1s on its first delivery (the server
  asks to come back later, which spends no attempt), and sent when it comes back;
- an address containing `relayed` is first handed to an HTTP relay: a `POST` of the email
  as JSON to `{relay_url}/send`, `relay_url` read from the operator's config (fatal when
  unset) with the secret `relay_token`, if any, as its bearer token; what the relay answers
  decides the job as `Response.job_result()` says (a 503 with `Retry-After` defers it that
  long, a 4xx is fatal, a 5xx retried), and its JSON `id` is logged;
- once sent, an `email.ReceiptPy` follow-up records the delivery;
- an email with a `message_id` is unique by it: while one is queued, held or running (for at
  most an hour), another enqueue of the same id is refused, naming the first job.

`email.DailyDigestPy` is a periodic job the plugin declares, as the Rust example's
`email.DailyDigest`: the fleet enqueues one every morning at 07:00 in Paris, exactly once
across its hosts, and it sends the digest as a follow-up `email.SendEmailPy`.

A payload that is not an email (`{"to": 42}`) is refused by `Email.from_json`, which
dead-letters it as a decode error without running the handler.
"""

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypedDict

from jobhost_sdk import (
    Context,
    Retry,
    Unique,
    config,
    deferred,
    fatal,
    http,
    job,
    plugin,
    queue,
    retryable,
)

emails = queue(
    "examples.emails-py", retry=Retry(max_attempts=4, backoff="exponential", base="1s", max="8s")
)

FLAKY_SUCCEEDS_ON = 3
"""The attempt on which a flaky address finally gets through."""

GREYLIST = timedelta(seconds=1)
"""How long a greylisting server asks the sender to wait."""

RELAY_TIMEOUT = "5s"
"""The longest the relay may take to connect, to start answering, or between two bytes."""


@dataclass(frozen=True)
class Email:
    to: str
    subject: str
    body: str

    @classmethod
    def from_json(cls, value: Any) -> "Email":
        """The email in `value`; raises (a decode error) when it is not one."""
        fields = {
            name: value.get(name) if isinstance(value, dict) else None
            for name in ("to", "subject", "body")
        }
        wrong = [name for name, text in fields.items() if not isinstance(text, str)]
        if wrong:
            raise ValueError(f"an email needs string fields {', '.join(wrong)}")
        return cls(**fields)


class Receipt(TypedDict):
    to: str
    attempt: int


class Digest(TypedDict):
    to: str


def send_email(email: Email, ctx: Context) -> None:
    if "@" not in email.to:
        raise fatal(f"invalid address `{email.to}`")
    if "flaky" in email.to and ctx.attempt < FLAKY_SUCCEEDS_ON:
        ctx.warn(f"smtp server busy for `{email.to}` (attempt {ctx.attempt} of {ctx.max_attempts})")
        raise retryable("smtp server busy")
    if "greylisted" in email.to and ctx.deferrals == 0:
        raise deferred(GREYLIST, f"greylisted by the server of `{email.to}`")
    if "relayed" in email.to:
        relay(email, ctx)
    ctx.info("email sent", to=email.to, subject=email.subject, bytes=len(email.body))
    ctx.enqueue("email.ReceiptPy", Receipt(to=email.to, attempt=ctx.attempt))


def relay(email: Email, ctx: Context) -> None:
    """Hand `email` to the operator's HTTP relay; raises what its answer means for the job."""
    url = config.require("relay_url").rstrip("/") + "/send"
    token = config.get("relay_token")
    headers = {"authorization": f"Bearer {token}"} if token else {}
    response = http.post(
        url,
        json={"to": email.to, "subject": email.subject, "body": email.body},
        headers=headers,
        timeout=RELAY_TIMEOUT,
    )
    response.job_result()
    # The relay took the email: an answer without its id is logged without it, not retried,
    # which would send the email twice.
    try:
        relay_id = response.json()["id"]
    except (ValueError, TypeError, KeyError):
        relay_id = None
    ctx.info("email relayed", to=email.to, relay_id=relay_id)


def record_receipt(receipt: Receipt, ctx: Context) -> None:
    ctx.info("receipt recorded", to=receipt["to"], attempt=receipt["attempt"])


def daily_digest(digest: Digest, ctx: Context) -> None:
    email = {"to": digest["to"], "subject": "Daily digest", "body": "Yesterday's emails went out."}
    ctx.enqueue("email.SendEmailPy", email)


PLUGIN = plugin(
    name="email-sender-py",
    queues=[emails],
    jobs=[
        job(
            "email.SendEmailPy",
            queue=emails,
            handler=send_email,
            decode=Email.from_json,
            unique=Unique(key="message_id", for_="1h"),
        ),
        job("email.ReceiptPy", queue=emails, handler=record_receipt),
        job(
            "email.DailyDigestPy",
            queue=emails,
            handler=daily_digest,
            cron="0 7 * * *",
            tz="Europe/Paris",
            payload={"to": "team@example.com"},
        ),
    ],
)
