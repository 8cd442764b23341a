package dev.idemd.client;

import java.time.Duration;
import java.util.concurrent.ThreadLocalRandom;

/**
 * How failed calls are retried. A call is retried when idemd answers 409
 * {@code request_in_progress}, 429 or 503, or when the connection was
 * refused (nothing was sent); never on any other 4xx. The wait before try
 * n+1 is the answer's Retry-After (capped at {@code maxRetryAfter}) plus a
 * random jitter in [0, min(maxDelay, baseDelay * 2^(n-1))].
 */
public record RetryPolicy(int attempts, Duration baseDelay, Duration maxDelay, Duration maxRetryAfter) {
    /** Four tries, 200 ms base, 5 s jitter cap, Retry-After honoured up to 30 s. */
    public static final RetryPolicy DEFAULT = new RetryPolicy(4, Duration.ofMillis(200), Duration.ofSeconds(5),
            Duration.ofSeconds(30));
    /** One try. */
    public static final RetryPolicy NONE = new RetryPolicy(1, Duration.ZERO, Duration.ZERO, Duration.ZERO);

    public RetryPolicy {
        if (attempts < 1) {
            throw new IllegalArgumentException("attempts must be >= 1");
        }
    }

    /** Whether ERROR may be retried. */
    public boolean isRetryable(IdemdException error) {
        if (error instanceof IdemdTransportException) {
            return !((IdemdTransportException) error).wasSent();
        }
        if (error instanceof IdemdProblemException) {
            IdemdProblemException p = (IdemdProblemException) error;
            return p.getStatus() == 429 || p.getStatus() == 503
                    || (p.getStatus() == 409 && RequestInProgressException.CODE.equals(p.getCode()));
        }
        return false;
    }

    /** The wait after the TRIES-th failed try. */
    public Duration delay(int tries, IdemdException error) {
        Duration after = Duration.ZERO;
        if (error instanceof IdemdProblemException && ((IdemdProblemException) error).getRetryAfter() != null) {
            after = ((IdemdProblemException) error).getRetryAfter();
            if (after.compareTo(maxRetryAfter) > 0) {
                after = maxRetryAfter;
            }
        }
        long window = Math.min(maxDelay.toMillis(), baseDelay.toMillis() << Math.min(tries - 1, 20));
        long jitter = window <= 0 ? 0 : ThreadLocalRandom.current().nextLong(window + 1);
        return after.plusMillis(jitter);
    }
}
