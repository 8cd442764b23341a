package dev.idemd.okhttp;

import java.io.IOException;

/** An idemd refusal the interceptor surfaces as an exception (an IOException, as OkHttp requires). */
public class SubmitRefusedException extends IOException {
    private static final long serialVersionUID = 1L;
    private final int status;
    private final String code;
    private final String detail;

    public SubmitRefusedException(int status, String code, String detail) {
        super(status + (code != null ? " " + code : "") + ": " + detail);
        this.status = status;
        this.code = code;
        this.detail = detail;
    }

    public int getStatus() {
        return status;
    }

    /** idemd's problem code, or null. */
    public String getCode() {
        return code;
    }

    public String getDetail() {
        return detail;
    }
}
