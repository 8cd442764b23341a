package dev.idemd.client;

/**
 * Every failure of an idemd call: {@link IdemdProblemException} (and its one
 * subclass per problem code) when idemd answered with a problem, or
 * {@link IdemdTransportException} when no answer came.
 */
public class IdemdException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public IdemdException(String message) {
        super(message);
    }

    public IdemdException(String message, Throwable cause) {
        super(message, cause);
    }
}
