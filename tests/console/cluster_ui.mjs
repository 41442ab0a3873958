// The console of a 3-node cluster in a real browser (Debian's Chromium driven by
// playwright-core), run by tests/cluster/test_console.py:
//   node cluster_ui.mjs ADMIN_URL TOPIC ARTIFACT_DIR
// The overview lists the three nodes, online, with the controller marked; the topic's
// partition table shows each follower's lag as its leader reports it. Screenshots go to
// ARTIFACT_DIR. Any failed expectation throws (exit code 1).
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import path from "node:path";

const [adminUrl, topic, artifacts] = process.argv.slice(2);
mkdirSync(artifacts, { recursive: true });

function expect(cond, what) {
  if (!cond) throw new Error("expected: " + what);
}

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.goto(adminUrl + "/#/overview");
  const nodes = page.locator('table[aria-label="Nodes"] tbody tr');
  await nodes.nth(2).waitFor({ timeout: 20_000 });
  const rows = await nodes.allTextContents();
  expect(rows.length === 3, "three nodes in the overview, got " + JSON.stringify(rows));
  expect(rows.every((r) => r.includes("online")), "every node online: " + JSON.stringify(rows));
  expect(rows.filter((r) => r.includes("controller")).length === 1, "one controller: " + JSON.stringify(rows));
  await page.screenshot({ path: path.join(artifacts, "cluster-overview.png"), fullPage: true });

  await page.goto(adminUrl + "/#/topics/" + encodeURIComponent(topic));
  const header = page.locator('table[aria-label="Partitions"] thead');
  await header.waitFor({ timeout: 20_000 });
  expect((await header.textContent()).includes("Follower lag"), "a follower lag column");
  const lag = await page.locator('table[aria-label="Partitions"] tbody tr').allTextContents();
  expect(lag.length > 0 && lag.every((r) => (r.match(/node \d: 0 rec/g) || []).length === 2),
    "two followers at 0 records behind in every row: " + JSON.stringify(lag));
  await page.screenshot({ path: path.join(artifacts, "cluster-topic.png"), fullPage: true });
  console.log("cluster console UI test passed");
} finally {
  await browser.close();
}
