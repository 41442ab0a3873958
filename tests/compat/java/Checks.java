// The check harness the Java compatibility programs share: each check prints one line,
// "CHECK <name> ok" or "CHECK <name> FAIL <reason>" (tests/compat/harness.py reads them); a
// check that needs another one which failed is reported as not run; a watchdog reports what is
// unfinished at the deadline and ends the JVM. Plain Java: it is compiled beside each program,
// whatever client jars that program is built against. The programs extend this class so that
// its members read as their own.

import java.util.*;

public class Checks {
    static final Map<String, String> reported = new LinkedHashMap<>();
    static volatile String running = "start-up";

    interface Check {
        void run() throws Exception;
    }

    static class CheckFailed extends Exception {
        CheckFailed(String why) {
            super(why);
        }
    }

    static void require(boolean ok, String what) throws CheckFailed {
        if (!ok) throw new CheckFailed(what);
    }

    static synchronized void report(String name, String failure) {
        if (reported.containsKey(name)) return;
        reported.put(name, failure);
        System.out.println("CHECK " + name + (failure == null ? " ok" : " FAIL " + failure.replace('\n', ' ')));
        System.out.flush();
    }

    static synchronized boolean passed(String name) {
        return reported.containsKey(name) && reported.get(name) == null;
    }

    static String describe(Throwable t) {
        StringBuilder sb = new StringBuilder();
        for (Throwable c = t; c != null && sb.length() < 600; c = c.getCause()) {
            if (sb.length() > 0) sb.append(" <- ");
            sb.append(c instanceof CheckFailed ? "" : c.getClass().getSimpleName() + ": ").append(c.getMessage());
            if (c.getCause() == c) break;
        }
        return sb.toString();
    }

    static void run(String name, Check check, String... needs) {
        for (String need : needs) {
            if (!passed(need)) {
                report(name, "not run: it needs " + need + ", which failed");
                return;
            }
        }
        running = name;
        long started = System.nanoTime();
        try {
            check.run();
            report(name, null);
        } catch (Throwable t) {
            System.err.println("check " + name + " failed:");
            t.printStackTrace();
            report(name, describe(t));
        }
        System.err.printf("INFO %s took %d ms%n", name, (System.nanoTime() - started) / 1_000_000);
    }

    /** Reports a check that ran inside another one (`within`). */
    static void after(String name, String result, String within) {
        if (result == null) report(name, "not reached: " + within + " failed before it");
        else report(name, result.isEmpty() ? null : result);
    }

    /** At the deadline, reports every unfinished check of `checks` and ends the JVM. */
    static void startWatchdog(List<String> checks, long deadlineSeconds) {
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(deadlineSeconds * 1000);
            } catch (InterruptedException e) {
                return;
            }
            for (String name : checks) report(name, "not finished within " + deadlineSeconds + " s (the run was in " + running + ")");
            Runtime.getRuntime().halt(3);
        });
        watchdog.setDaemon(true);
        watchdog.start();
    }
}
