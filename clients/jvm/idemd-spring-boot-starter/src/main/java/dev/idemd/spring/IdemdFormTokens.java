package dev.idemd.spring;

import dev.idemd.client.IdemdClient;
import dev.idemd.client.IssuedToken;
import org.springframework.ui.Model;

/**
 * Issues the token of a form while it is rendered, for
 * {@link KeySource#TOKEN} handlers: put it in a hidden field named
 * {@code idemd_token}.
 *
 * <pre>{@code
 * @GetMapping("/checkout")
 * public String checkout(Model model, Principal user) {
 *     formTokens.issue(model, "order.create", user.getName());
 *     return "checkout"; // <input type="hidden" name="idemd_token" th:value="${idemdToken}">
 * }
 * }</pre>
 */
public class IdemdFormTokens {
    private final IdemdClient client;
    private final IdemdProperties properties;

    public IdemdFormTokens(IdemdClient client, IdemdProperties properties) {
        this.client = client;
        this.properties = properties;
    }

    /** Issues a token and adds it to MODEL under {@code idemdToken}; returns it. */
    public String issue(Model model, String operation, String subject) {
        String token = client.issue(operation, subject).token();
        model.addAttribute(properties.getModelAttribute(), token);
        return token;
    }

    /** Issues a token (its id and expiry included). */
    public IssuedToken issue(String operation, String subject) {
        return client.issue(operation, subject);
    }

    /** The form field the submit must carry the token in. */
    public String getParameterName() {
        return properties.getTokenParameter();
    }
}
