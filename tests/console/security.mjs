// The console's Security page in a real browser (Debian's Chromium driven by playwright-core),
// run by test_console_security.py:
//   node security.mjs ADMIN_URL ARTIFACT_DIR
// A super user (HTTP basic, the browser's own login) creates a SCRAM user, adds and removes an
// ACL; a user without ACLs is refused with the reason. Any failed expectation throws.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import path from "node:path";

const [adminUrl, artifacts] = process.argv.slice(2);
mkdirSync(artifacts, { recursive: true });

function expect(cond, what) {
  if (!cond) throw new Error("expected: " + what);
}

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
});
try {
  const admin = await browser.newContext({ httpCredentials: { username: "admin", password: "admin-secret" } });
  const page = await admin.newPage();
  await page.goto(adminUrl + "/#/security");
  await page.getByRole("heading", { name: "Security" }).waitFor({ timeout: 20_000 });
  // A user, made here.
  await page.locator("#user-name").fill("bob");
  await page.locator("#user-password").fill("bob-secret-1");
  await page.getByRole("button", { name: "Save user" }).click();
  await page.getByRole("button", { name: "Delete bob" }).waitFor({ timeout: 20_000 });
  const users = await page.getByRole("table", { name: "Users" }).textContent();
  expect(users.includes("SCRAM-SHA-256") && users.includes("SCRAM-SHA-512"), "bob's mechanisms listed: " + users);
  // An ACL, added and removed.
  await page.locator("#acl-type").selectOption("topic");
  await page.locator("#acl-name").fill("orders");
  await page.locator("#acl-principal").fill("User:bob");
  await page.locator("#acl-operation").selectOption("Write");
  await page.getByRole("button", { name: "Add ACL" }).click();
  const acls = page.getByRole("table", { name: "ACLs" });
  await acls.getByText("topic orders").waitFor({ timeout: 20_000 });
  expect((await acls.textContent()).includes("User:bob"), "the ACL names bob");
  await page.screenshot({ path: path.join(artifacts, "security.png"), fullPage: true });
  await acls.getByRole("button", { name: "Remove" }).click();
  await page.getByText("No ACLs").waitFor({ timeout: 20_000 });
  // Bad input: the broker's reason is shown.
  await page.locator("#acl-type").selectOption("cluster");
  await page.locator("#acl-name").fill("not-the-cluster");
  await page.locator("#acl-principal").fill("User:bob");
  await page.getByRole("button", { name: "Add ACL" }).click();
  await page.getByText("kafka-cluster").first().waitFor({ timeout: 20_000 });
  // bob, with no ACL, may not read this page.
  const bob = await browser.newContext({ httpCredentials: { username: "bob", password: "bob-secret-1" } });
  const bobPage = await bob.newPage();
  await bobPage.goto(adminUrl + "/#/security");
  await bobPage.getByText("Describe on the cluster").first().waitFor({ timeout: 20_000 });
  await bobPage.screenshot({ path: path.join(artifacts, "security-refused.png"), fullPage: true });
  console.log("security test passed");
} finally {
  await browser.close();
}
