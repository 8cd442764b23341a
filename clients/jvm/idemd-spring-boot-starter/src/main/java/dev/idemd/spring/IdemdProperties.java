package dev.idemd.spring;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.springframework.boot.context.properties.ConfigurationProperties;

/** {@code idemd.*} in application.yml. */
@ConfigurationProperties(prefix = "idemd")
public class IdemdProperties {
    /** idemd's base URL, e.g. http://127.0.0.1:8080 (no client is made without it). */
    private String url;
    /** The tenant's API key. */
    private String apiKey;
    /** Per-request timeout. */
    private Duration timeout = Duration.ofSeconds(10);
    /** Tries per call (409 request_in_progress, 429 and 503 are retried). */
    private int retryAttempts = 4;
    /** Seconds a duplicate waits for an in-progress outcome (Prefer: wait). */
    private int waitSeconds = 10;
    /** The form field carrying the token of {@link KeySource#TOKEN} methods. */
    private String tokenParameter = "idemd_token";
    /** The model attribute {@link IdemdFormTokens} puts the token under. */
    private String modelAttribute = "idemdToken";
    /** Response headers stored and replayed beside Content-Type and Location. */
    private List<String> storeHeaders = new ArrayList<>();
    /**
     * Headers whose values, hashed, scope {@link Idempotent} caller keys per
     * caller (default Authorization and Cookie; empty: keys as sent).
     */
    private List<String> scopeHeaders = new ArrayList<>(dev.idemd.client.CallerScope.DEFAULT_HEADERS);

    public String getUrl() {
        return url;
    }

    public void setUrl(String url) {
        this.url = url;
    }

    public String getApiKey() {
        return apiKey;
    }

    public void setApiKey(String apiKey) {
        this.apiKey = apiKey;
    }

    public Duration getTimeout() {
        return timeout;
    }

    public void setTimeout(Duration timeout) {
        this.timeout = timeout;
    }

    public int getRetryAttempts() {
        return retryAttempts;
    }

    public void setRetryAttempts(int retryAttempts) {
        this.retryAttempts = retryAttempts;
    }

    public int getWaitSeconds() {
        return waitSeconds;
    }

    public void setWaitSeconds(int waitSeconds) {
        this.waitSeconds = waitSeconds;
    }

    public String getTokenParameter() {
        return tokenParameter;
    }

    public void setTokenParameter(String tokenParameter) {
        this.tokenParameter = tokenParameter;
    }

    public String getModelAttribute() {
        return modelAttribute;
    }

    public void setModelAttribute(String modelAttribute) {
        this.modelAttribute = modelAttribute;
    }

    public List<String> getStoreHeaders() {
        return storeHeaders;
    }

    public void setStoreHeaders(List<String> storeHeaders) {
        this.storeHeaders = storeHeaders;
    }

    public List<String> getScopeHeaders() {
        return scopeHeaders;
    }

    public void setScopeHeaders(List<String> scopeHeaders) {
        this.scopeHeaders = scopeHeaders;
    }
}
