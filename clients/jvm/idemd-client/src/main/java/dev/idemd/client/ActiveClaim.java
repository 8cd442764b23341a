package dev.idemd.client;

/** A claim held by the work of {@link IdemdClient#claim}: extend its lease, leave checkpoints. */
public final class ActiveClaim {
    private final IdemdClient client;
    private final ClaimTarget target;
    private final Claimed claimed;

    ActiveClaim(IdemdClient client, ClaimTarget target, Claimed claimed) {
        this.client = client;
        this.target = target;
        this.claimed = claimed;
    }

    public ClaimTarget getTarget() {
        return target;
    }

    /** The claim's answer (attempt, lease, id). */
    public Claimed getClaimed() {
        return claimed;
    }

    public int getAttempt() {
        return claimed.attempt();
    }

    /** The record's id (caller keys), to forward downstream as an idempotency key. */
    public String getId() {
        return claimed.id();
    }

    /** An earlier attempt's last checkpoint (resume from it), or null. */
    public Checkpoint getCheckpoint() {
        return claimed.checkpoint();
    }

    /** A fresh lease (null: the operation's lease_seconds). */
    public SimpleResult extend(Integer leaseSeconds) {
        return target.isToken() ? client.extendToken(target.token(), getAttempt(), leaseSeconds)
                : client.extendKey(target.operation(), target.key(), getAttempt(), leaseSeconds);
    }

    /** Leaves a recovery point for the next attempt. */
    public SimpleResult checkpoint(String phase, Object data) {
        return target.isToken() ? client.checkpointToken(target.token(), getAttempt(), phase, data)
                : client.checkpointKey(target.operation(), target.key(), getAttempt(), phase, data);
    }
}
