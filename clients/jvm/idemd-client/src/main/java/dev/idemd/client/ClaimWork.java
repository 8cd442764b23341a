package dev.idemd.client;

/** The work a claim guards; it runs only for a new claim (or a takeover). */
@FunctionalInterface
public interface ClaimWork {
    /**
     * Does the work once and returns what to store: an {@link Outcome}, or
     * any other value as a 200 with that JSON body (null: an empty body).
     */
    Object run(ActiveClaim claim) throws Exception;
}
