// The console in a real browser (Debian's Chromium driven by playwright-core), run by
// test_console_ui.py:
//   node ui.mjs ADMIN_URL BOOTSTRAP PYTHON ARTIFACT_DIR OTHER_ADMIN_URL
// Creates a topic in the UI, produces with confluent-kafka, reads the records in the message
// browser, watches a group's lag fall to 0 while kafka-python consumes, resets the group's
// offsets with a preview, produces a test record from the page, deletes records below an
// offset, deletes a topic with a typed confirmation, switches to a second cluster, and checks
// the layout on a phone-sized screen.
// Screenshots go to ARTIFACT_DIR. Any failed expectation throws (exit code 1).
import { chromium } from "playwright-core";
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const [adminUrl, bootstrap, python, artifacts, otherAdminUrl] = process.argv.slice(2);
const here = path.dirname(fileURLToPath(import.meta.url));
mkdirSync(artifacts, { recursive: true });

function expect(cond, what) {
  if (!cond) throw new Error("expected: " + what);
}

function clients(...args) {
  return execFileSync(python, [path.join(here, "kafka_clients.py"), ...args],
    { stdio: ["ignore", "pipe", "inherit"], timeout: 90_000, encoding: "utf8" });
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(artifacts, name + ".png"), fullPage: true });
}

async function waitText(locator, pred, what, ms = 20_000) {
  const end = Date.now() + ms;
  let last = null;
  while (Date.now() < end) {
    last = (await locator.textContent().catch(() => null)) || "";
    if (pred(last)) return last;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`timed out waiting for ${what}; last text: ${JSON.stringify(last)}`);
}

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
const external = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  // The console must load nothing from anywhere but the broker.
  page.on("request", (r) => { if (!r.url().startsWith(adminUrl)) external.push(r.url()); });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));

  // 1. Create a topic in the UI.
  await page.goto(adminUrl + "/#/topics");
  await page.getByLabel("Name", { exact: true }).fill("ui-orders");
  await page.getByLabel("Partitions", { exact: true }).fill("2");
  await page.getByLabel("Configs (name=value per line)").fill("retention.ms=3600000");
  await page.getByRole("button", { name: "Create topic" }).click();
  await page.getByRole("heading", { name: "Topic ui-orders" }).waitFor();
  const partitionRows = await page.locator('table[aria-label="Partitions"] tbody tr').count();
  expect(partitionRows === 2, "2 partition rows, got " + partitionRows);
  expect((await page.locator('table[aria-label="Configs"]').textContent()).includes("3600000"), "the retention override listed");
  await shot(page, "1-topic-created");

  // Bad input shows a clear message: an existing topic.
  await page.goto(adminUrl + "/#/topics");
  await page.getByLabel("Name", { exact: true }).fill("ui-orders");
  await page.getByRole("button", { name: "Create topic" }).click();
  await waitText(page.locator("#flash"), (t) => t.includes("already exists"), "the duplicate-topic error");

  // 2. Produce with a real Kafka client; 3. see the records in the message browser.
  clients("produce", bootstrap, "ui-orders", "100");
  await page.goto(adminUrl + "/#/messages?topic=ui-orders");
  let seen = 0;
  for (const p of ["0", "1"]) {
    await page.locator("#browse-partition").selectOption(p);
    await page.locator("#browse-from").selectOption("oldest");
    await page.locator("#browse-order").selectOption("oldest_first");
    await page.locator("#browse-limit").fill("500");
    await page.getByRole("button", { name: "Load" }).click();
    await waitText(page.locator("#browse-results"), (t) => t.includes("Partition " + p), "partition " + p + " loaded");
    seen += await page.locator('table[aria-label="Messages"] tbody tr:not(:has(td.muted))').count();
  }
  expect(seen === 100, "all 100 records across both partitions, saw " + seen);
  const results = page.locator("#browse-results");
  expect((await results.textContent()).includes('"amount":'), "JSON values shown as text");
  expect((await results.textContent()).includes("source: console-test"), "headers shown");
  await page.locator("#browse-format").selectOption("json");
  await waitText(results, (t) => t.includes('"amount": '), "pretty JSON");
  await shot(page, "2-message-browser-json");
  await page.locator("#browse-format").selectOption("hex");
  await waitText(results, (t) => /7b 22 6f 72 64 65 72/.test(t), "hex view of {\"order");

  // 4. The group's lag falls to 0 as a consumer reads.
  const partial = clients("consume", bootstrap, "ui-orders", "ui-group", "40");
  const lagSeen = Number((/lag=(\d+)/.exec(partial) || [])[1]);
  expect(lagSeen > 0, "kafka-python sees a lag after reading 40 of 100: " + partial);
  await page.goto(adminUrl + "/#/groups/ui-group");
  await waitText(page.locator("#total-lag"), (t) => t.trim() === String(lagSeen), "the lag kafka-python sees, " + lagSeen);
  await shot(page, "3-group-lag-60");
  expect(/lag=0\b/.test(clients("consume", bootstrap, "ui-orders", "ui-group", "60")), "kafka-python sees lag 0");
  await waitText(page.locator("#total-lag"), (t) => t.trim() === "0", "lag 0 after reading everything");
  // The lag chart has drawn the fall (a path in its SVG).
  await page.waitForFunction(() => document.querySelector("#group-live svg path") !== null);
  await shot(page, "4-group-lag-0");

  // 5. Reset the (now empty) group's offsets with a preview.
  await page.locator("#reset-topic").selectOption("ui-orders");
  await page.locator("#reset-to").selectOption("earliest");
  expect(await page.locator("#reset-apply").isDisabled(), "apply is disabled before a preview");
  await page.getByRole("button", { name: "Preview" }).click();
  await page.locator('table[aria-label="Offset reset preview"]').waitFor();
  const preview = await page.locator('table[aria-label="Offset reset preview"] tbody').textContent();
  expect(preview.includes("0"), "preview lists the new offsets");
  // Columns: topic, partition, current, new; every new offset is 0 (the earliest).
  const newOffsets = await page.locator('table[aria-label="Offset reset preview"] tbody tr td:nth-child(4)').allTextContents();
  expect(newOffsets.length === 2 && newOffsets.every((t) => t.trim() === "0"), "new offsets all 0: " + newOffsets);
  await shot(page, "5-reset-preview");
  await page.locator("#reset-apply").click();
  await waitText(page.locator("#total-lag"), (t) => t.trim() === "100", "lag 100 after resetting to earliest");

  // 6. Produce a test record from the page and see it first in the browser.
  await page.goto(adminUrl + "/#/messages?topic=ui-orders");
  await page.locator("#produce-partition").selectOption("1");
  await page.locator("#produce-key").fill("from-the-page");
  await page.locator("#produce-value").fill("hello from the console");
  await page.locator("#produce-headers").fill("origin=ui");
  await page.locator("#browse-partition").selectOption("1");
  await page.getByRole("button", { name: "Send" }).click();
  await waitText(page.locator("#flash"), (t) => t.includes("partition 1 at offset"), "the produce confirmation");
  const first = page.locator('table[aria-label="Messages"] tbody tr').first();
  await waitText(first, (t) => t.includes("hello from the console") && t.includes("origin: ui"), "the test record, newest first");
  await shot(page, "6-test-record");

  // 6b. Delete records below an offset of one partition (after a confirmation tick); the
  // partition table and a real client's ListOffsets show the new log start.
  await page.goto(adminUrl + "/#/topics/ui-orders");
  await page.locator("#purge-partition").selectOption("1");
  await page.locator("#purge-before").fill("5");
  const purgeButton = page.getByRole("button", { name: "Delete records" });
  expect(await purgeButton.isDisabled(), "delete records stays disabled until confirmed");
  await page.locator("#purge-sure").check();
  await purgeButton.click();
  await waitText(page.locator("#flash"), (t) => t.includes("log start now 1:5"), "the delete-records confirmation");
  const logStart = page.locator('table[aria-label="Partitions"] tbody tr:nth-child(2) td:nth-child(5)');
  await waitText(logStart, (t) => t.trim() === "5", "partition 1's log start 5 in the table");
  expect(/earliest=5\b/.test(clients("earliest", bootstrap, "ui-orders", "1")), "kafka-python's earliest offset is 5");
  await shot(page, "6b-delete-records");

  // 7. Delete a topic with a typed confirmation.
  await page.goto(adminUrl + "/#/topics");
  await page.getByLabel("Name", { exact: true }).fill("ui-doomed");
  await page.getByRole("button", { name: "Create topic" }).click();
  await page.getByRole("heading", { name: "Topic ui-doomed" }).waitFor();
  const del = page.getByRole("button", { name: "Delete topic" });
  await page.locator("#delete-confirm").fill("ui-doome");
  expect(await del.isDisabled(), "delete stays disabled until the name is typed exactly");
  await page.locator("#delete-confirm").fill("ui-doomed");
  await del.click();
  await page.getByRole("heading", { name: "Topics", exact: true }).waitFor();
  await waitText(page.locator("#topic-list"), (t) => t.includes("ui-orders") && !t.includes("ui-doomed"), "ui-doomed gone");

  // 8. Overview with live charts; reachable with the keyboard.
  await page.locator('nav a[href="#/overview"]').focus();
  await page.keyboard.press("Enter");
  await page.getByRole("heading", { name: "Overview" }).waitFor();
  expect((await page.locator(".chart svg").count()) === 3, "three charts");
  await page.waitForFunction(() => document.querySelectorAll(".chart svg path").length >= 2);
  await shot(page, "7-overview");

  // 9. Another cluster: register it, switch to it, see its topics; switch back.
  await page.goto(adminUrl + "/#/clusters");
  await page.getByLabel("Name", { exact: true }).fill("second");
  await page.getByLabel("Admin address").fill(otherAdminUrl);
  await page.getByRole("button", { name: "Register" }).click();
  await waitText(page.locator("#flash"), (t) => t.includes("Registered cluster second"), "registration");
  await page.locator("#cluster").selectOption("second");
  await page.goto(adminUrl + "/#/topics");
  await waitText(page.locator("#topic-list"), (t) => t.includes("only-on-second") && !t.includes("ui-orders"), "the second cluster's topics");
  await shot(page, "8-second-cluster");
  await page.locator("#cluster").selectOption("local");
  await waitText(page.locator("#topic-list"), (t) => t.includes("ui-orders"), "back on this cluster");

  expect(errors.length === 0, "no script errors: " + errors.join("; "));

  // 10. A phone-sized screen: nothing wider than the screen but scrollable tables.
  const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  const small = await phone.newPage();
  await small.goto(adminUrl + "/#/overview");
  await small.getByRole("heading", { name: "Overview" }).waitFor();
  const overflow = await small.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  expect(overflow <= 1, "no sideways scrolling on a phone, overflow " + overflow + "px");
  await shot(small, "9-phone-overview");
  await small.goto(adminUrl + "/#/messages?topic=ui-orders");
  await small.locator("#browse-results table").waitFor();
  await shot(small, "10-phone-messages");
  await phone.close();
  expect(external.length === 0, "no requests leave the broker: " + external.join(", "));
  console.log("console UI test passed");
} catch (e) {
  for (const c of browser.contexts()) {
    for (const p of c.pages()) await shot(p, "failure-" + c.pages().indexOf(p)).catch(() => {});
  }
  throw e;
} finally {
  await browser.close();
}
