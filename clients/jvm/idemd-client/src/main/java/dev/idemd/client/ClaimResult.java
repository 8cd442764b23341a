package dev.idemd.client;

/**
 * The end of {@link IdemdClient#claim}: the stored response, new or replayed.
 *
 * @param replayed true when the work had been done before: it did not run now
 * @param response the stored response: the replayed one, or the one just completed
 * @param value what the work returned (null on a replay)
 * @param claimed the claim's answer
 */
public record ClaimResult(boolean replayed, StoredResponse response, Object value, Claimed claimed) {
}
